#!/usr/bin/env python3
"""A stdlib-only Python client of fencelock's HTTP API (docs/http.md).

    python3 fencelock_client.py http://127.0.0.1:7080 jobs/report out.txt

opens a session (heartbeating in a thread), takes the lock with wait (queued
server-side; the grant arrives on the watch stream), writes the file with
its fencing token, releases, and closes the session.

The session's secret (session_secret, in the create response only) is its
credential: every call acting on the session sends it in the
Fencelock-Session-Secret header. Keep it like a password. With
FENCELOCK_TOKEN_FILE set (as for the fencelock command), every call sends the
file's first line as the bearer token.
"""
import json, os, sys, threading, time, urllib.error, urllib.parse, urllib.request


class Session:
    def __init__(self, base, ttl_ms=10000):
        self.base = base.rstrip("/")
        self.token = ""
        if os.environ.get("FENCELOCK_TOKEN_FILE"):
            with open(os.environ["FENCELOCK_TOKEN_FILE"]) as f:
                self.token = f.readline().strip()
        self.secret = None
        sent = time.monotonic()
        r = self.call("POST", "/v1/sessions", {"ttl_ms": ttl_ms})
        self.id, self.ttl, self.lease = r["session_id"], r["timeout_ms"] / 1000, r["lease_ms"] / 1000
        self.secret = r["session_secret"]  # shown once: no other answer has it
        self.deadline, self.lost = sent + self.lease, threading.Event()
        threading.Thread(target=self._heartbeat, daemon=True).start()

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=self.headers())
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else {}
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: {e.code} {e.read().decode()}") from None

    def headers(self):
        h = {"Content-Type": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if self.secret:
            h["Fencelock-Session-Secret"] = self.secret
        return h

    def _heartbeat(self):
        # Every TTL/3; the holder may act until lease_ms after the send of
        # the last heartbeat answered, and must stop then.
        while not self.lost.wait(self.ttl / 3):
            sent = time.monotonic()
            try:
                self.call("POST", f"/v1/sessions/{self.id}/heartbeat")
                self.deadline = max(self.deadline, sent + self.lease)
            except RuntimeError:  # 404: the session is over
                self.lost.set()
            except OSError:
                pass  # the replica is unreachable: the deadline decides

    def holding(self):
        return not self.lost.is_set() and time.monotonic() < self.deadline

    def acquire(self, name):
        """Waits in the lock's queue; returns (token, first queue position)."""
        path = "/v1/locks/" + urllib.parse.quote(name, safe="")
        # Watch first: the stream begins with the current state, so a grant
        # between the acquire's answer and the stream's start is not missed.
        watch = urllib.request.urlopen(urllib.request.Request(self.base + path + "/watch", headers=self.headers()), timeout=300)
        try:
            r = self.call("POST", path + "/acquire", {"session_id": self.id, "wait": True})
            position = r.get("queue_position", 0)
            for line in watch:
                if r["granted"]:
                    return r["fencing_token"], position
                line = line.decode().strip()
                if line.startswith("data: ") and json.loads(line[6:]).get("holder_session") == self.id:
                    r = self.call("POST", path + "/acquire", {"session_id": self.id, "wait": True})
            raise RuntimeError("watch stream ended")
        finally:
            watch.close()

    def release(self, name, token):
        path = "/v1/locks/" + urllib.parse.quote(name, safe="")
        self.call("POST", path + "/release", {"session_id": self.id, "fencing_token": token})

    def close(self):
        self.lost.set()
        self.call("DELETE", f"/v1/sessions/{self.id}")


def main(base, name, out):
    s = Session(base)
    token, position = s.acquire(name)
    if not s.holding():
        sys.exit("lost the lock before writing")
    with open(out, "a") as f:  # a real resource checks the token (fencing)
        f.write(f"{token} written by session {s.id}\n")
    s.release(name, token)
    s.close()
    print(json.dumps({"session_id": s.id, "fencing_token": token, "queue_position": position}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
