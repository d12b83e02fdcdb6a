"""Unit tests of fencelock_client.py's deadline against a fake API in this
process (python_test.go runs them: go test ./examples/python/)."""
import http.server, json, threading, time, unittest

import fencelock_client as fc


class FakeAPI(http.server.ThreadingHTTPServer):
    """Answers a session's create (lease_ms 6000), heartbeats (200 with
    lease_ms 6000 while self.beats is "ok", else 503), a lock's watch (one
    state event) and its acquire (granted, with self.grant_lease as lease_ms;
    None: without the field, as an older server)."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.beats, self.grant_lease, self.heartbeats = "ok", None, 0
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body=None):
        raw = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        api = self.server
        if self.path == "/v1/sessions":
            self.answer(201, {"session_id": "7", "session_secret": "s", "timeout_ms": 10000, "lease_ms": 6000})
        elif self.path.endswith("/heartbeat"):
            api.heartbeats += 1
            if api.beats == "ok":
                self.answer(200, {"timeout_ms": 10000, "lease_ms": 6000, "leases": {"": 6000}})
            else:
                self.answer(503, {"error": "unreachable", "code": "unavailable"})
        elif self.path.endswith("/acquire"):
            a = {"granted": True, "fencing_token": "9", "fence": "00000000000000ab:9", "holder_session": "7"}
            if api.grant_lease is not None:
                a["lease_ms"] = api.grant_lease
            self.answer(200, a)
        else:
            self.answer(404, {"error": "no such path", "code": "not_found"})

    def do_GET(self):
        if self.path.endswith("/watch"):
            raw = b'event: state\ndata: {"name": "jobs/x", "held": false}\n\n'
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        else:
            self.answer(404, {"error": "no such path", "code": "not_found"})

    def do_DELETE(self):
        self.send_response(204)
        self.end_headers()


def wait_until(cond, timeout):
    end = fc.now() + timeout
    while not cond():
        if fc.now() > end:
            return False
        time.sleep(0.01)
    return True


class GrantLeaseTest(unittest.TestCase):
    def setUp(self):
        self.api = FakeAPI()
        self.addCleanup(self.api.server_close)
        self.addCleanup(self.api.shutdown)

    def session(self):
        s = fc.Session([self.api.url])
        # Stops its heartbeat thread (woken at once, where it can be).
        self.addCleanup(lambda: (s.lost.set(), getattr(s, "wake", s.lost).set()))
        return s

    def test_grant_lease_ends_holding(self):
        """A grant's lease of 0.5s, with every heartbeat failing after:
        holding() ends by the acquire's send + 0.5s, not by the heartbeats'
        lease (6s)."""
        s = self.session()
        self.api.grant_lease, self.api.beats = 500, "fail"
        sent = fc.now()
        s.acquire("jobs/x")
        got = fc.now()
        self.assertLessEqual(s.deadline, got + 0.5)
        self.assertGreaterEqual(s.deadline, sent + 0.5)
        self.assertTrue(wait_until(lambda: not s.holding(), 5))
        self.assertGreaterEqual(fc.now(), s.deadline)
        self.assertGreaterEqual(self.api.heartbeats, 1, "a heartbeat was tried at once")

    def test_heartbeat_after_the_grant_lifts_it(self):
        """A grant's lease (1s) that ends before the next heartbeat (2s)
        makes the client heartbeat at once; answered, it lifts the deadline:
        still holding after the grant's lease."""
        s = self.session()
        self.api.grant_lease = 1000
        s.acquire("jobs/x")
        self.assertTrue(wait_until(lambda: s.deadline > fc.now() + 3, 5), "no heartbeat lifted the deadline")
        time.sleep(1.2)  # past the grant's lease
        self.assertTrue(s.holding())

    def test_no_lease_field_changes_nothing(self):
        s = self.session()
        before = s.deadline
        s.acquire("jobs/x")
        self.assertEqual(before, s.deadline)

    def test_heartbeat_sent_before_the_grant_answer(self):
        """A heartbeat sent before a grant's answer arrived (its round may
        have left the grant's group out) stays within the grant's bound;
        one sent after lifts it."""
        s = self.session()
        s.lost.set()  # no heartbeat thread: this test drives the answers
        t = fc.now()
        s.grant_lease(t + 0.1, t + 0.15, 1.0)
        self.assertEqual(s.deadline, t + 1.1)
        s.grant_lease(t + 0.2, t + 0.25, 5.0)
        self.assertEqual(s.deadline, t + 1.1, "a longer grant lease raises nothing")
        s.renewed(t + 0.24, 6.0)
        self.assertEqual(s.deadline, t + 1.1)
        s.renewed(t + 0.3, 6.0)
        self.assertEqual(s.deadline, t + 6.3)
        s.renewed(t + 0.28, 6.0)
        self.assertEqual(s.deadline, t + 6.3)


if __name__ == "__main__":
    unittest.main()
