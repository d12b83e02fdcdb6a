#!/usr/bin/env python3
"""A stdlib-only Python client of fencelock's HTTP API (docs/http.md).

    python3 fencelock_client.py [--http URL[,URL...]] [--ttl SECONDS] NAME OUT

opens a session on the first replica of --http that answers (default: the
FENCELOCK_HTTP environment variable, as for the fencelock command, else
http://127.0.0.1:7080), heartbeating in a thread and failing over to the
next replica of the list when one does not answer; takes the lock NAME with
wait (queued server-side; the grant arrives on the watch stream); appends a
line with its fence to the file OUT; releases, and closes the session. It
prints the result as JSON. A replica that cannot be reached, or an API
error, ends it with a one-line message and exit status 1.

The session's secret (session_secret, in the create response only) is its
credential: every call acting on the session sends it in the
Fencelock-Session-Secret header. Keep it like a password. With
FENCELOCK_TOKEN_FILE set (as for the fencelock command), every call sends the
file's first line as the bearer token.
"""
import argparse, json, os, sys, threading, time, urllib.error, urllib.parse, urllib.request


# The holder's deadline is timed on a clock that counts the time the machine
# was suspended (CLOCK_BOOTTIME, on Linux), as the fencelock library and
# command do: time.monotonic stops during a suspend, and a deadline on it
# would end late by as long.
if hasattr(time, "CLOCK_BOOTTIME"):
    def now():
        return time.clock_gettime(time.CLOCK_BOOTTIME)
else:
    now = time.monotonic


class APIError(Exception):
    """An error answer of the API: status and code as docs/http.md lists them."""

    def __init__(self, method, path, status, body):
        try:
            err = json.loads(body)
        except ValueError:
            err = {"error": body.strip(), "code": "http"}
        self.status, self.code = status, err.get("code", "http")
        super().__init__(f"{method} {path}: {status} {self.code}: {err.get('error', '')}")


class Unreachable(Exception):
    """No replica answered."""


class Session:
    """A session opened through the first replica of bases that answers.

    Every call goes to the replica that answered last and fails over to the
    next in bases when one does not answer (refused, reset, timed out) or
    answers 503 (closing, no quorum), 421 (the session lives elsewhere),
    502 or 504: the API answers a repeated acquire of a session and lock
    with the first one's state and never queues twice, so a call retried on
    another replica is safe. Where the session itself lives is the
    server's business (docs/http.md); the holder's deadline is not: it
    stops acting lease_ms after the send of the last heartbeat answered, or
    earlier if a grant's answer says so (its own lease_ms, from that call's
    send: the grant lasts only as long as the session's part in its group,
    which a heartbeat may have left out while it held nothing)."""

    FAILOVER = (421, 502, 503, 504)

    def __init__(self, bases, ttl_ms=10000):
        self.token = ""
        if os.environ.get("FENCELOCK_TOKEN_FILE"):
            with open(os.environ["FENCELOCK_TOKEN_FILE"]) as f:
                self.token = f.readline().strip()
        self.bases, self.cur, self.secret = [b.rstrip("/") for b in bases], 0, None
        sent = now()
        r = self.call("POST", "/v1/sessions", {"ttl_ms": ttl_ms})
        self.id, self.ttl, self.lease = r["session_id"], r["timeout_ms"] / 1000, r["lease_ms"] / 1000
        self.secret = r["session_secret"]  # shown once: no other answer has it
        self.deadline, self.lost = sent + self.lease, threading.Event()
        # A grant's lease bounds the deadline by cap; a heartbeat sent before
        # cap_at (when the last such answer arrived) may have left that
        # grant's group out, and moves the deadline no later than cap.
        self.cap = self.cap_at = None
        self.mu, self.wake = threading.Lock(), threading.Event()
        threading.Thread(target=self._heartbeat, daemon=True).start()

    @property
    def base(self):
        return self.bases[self.cur]

    def call(self, method, path, body=None, timeout=30):
        """Makes the call on the replicas in turn, from the last that
        answered; raises APIError for an answer that is no reason to ask
        another, Unreachable when none answered. Each replica but the last
        gets at most 5s (or timeout, if less), so that one that accepts
        connections but does not answer leaves time for the others."""
        data = json.dumps(body).encode() if body is not None else None
        errors, n = [], len(self.bases)
        for k in range(n):
            i = (self.cur + k) % n
            req = urllib.request.Request(self.bases[i] + path, data=data, method=method, headers=self.headers())
            try:
                with urllib.request.urlopen(req, timeout=timeout if k == n - 1 else min(5, timeout)) as resp:
                    raw = resp.read()
                    self.cur = i
                    return json.loads(raw) if raw else {}
            except urllib.error.HTTPError as e:
                err = APIError(method, path, e.code, e.read().decode(errors="replace"))
                if e.code not in self.FAILOVER:
                    self.cur = i
                    raise err from None
                errors.append(f"{self.bases[i]}: {err}")
            except (OSError, ValueError) as e:  # refused, reset, timed out; a garbled answer
                errors.append(f"{self.bases[i]}: {getattr(e, 'reason', e)}")
        raise Unreachable("no replica answered: " + "; ".join(errors))

    def watch(self, path):
        """Opens the lock's watch stream on the replicas in turn."""
        errors, n = [], len(self.bases)
        for k in range(n):
            i = (self.cur + k) % n
            try:
                req = urllib.request.Request(self.bases[i] + path + "/watch", headers=self.headers())
                stream = urllib.request.urlopen(req, timeout=60)  # the API pings every 15s
                self.cur = i
                return stream
            except urllib.error.HTTPError as e:
                err = APIError("GET", path + "/watch", e.code, e.read().decode(errors="replace"))
                if e.code not in self.FAILOVER:
                    raise err from None
                errors.append(f"{self.bases[i]}: {err}")
            except OSError as e:
                errors.append(f"{self.bases[i]}: {getattr(e, 'reason', e)}")
        raise Unreachable("no replica answered: " + "; ".join(errors))

    def headers(self):
        h = {"Content-Type": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if self.secret:
            h["Fencelock-Session-Secret"] = self.secret
        return h

    def _heartbeat(self):
        # Every lease/3 (the lease is 3/5 of the TTL): a heartbeat that goes
        # unanswered leaves two more before the lease runs out. The holder
        # may act until lease_ms after the send of the last heartbeat
        # answered, and must stop then. Each answer's lease_ms covers every
        # group the session holds something in (one that could not be
        # renewed fails the heartbeat with 503).
        # A grant whose lease ends before the next heartbeat is due wakes
        # the thread early (grant_lease): the heartbeat then renews the
        # grant's group too.
        every = max(min(self.ttl, self.lease) / 3, 0.01)
        while True:
            self.wake.wait(every)
            self.wake.clear()
            if self.lost.is_set():
                return
            sent = now()
            try:
                # A heartbeat may take up to half the lease to be answered
                # (a busy replica, a leader change): the deadline counts
                # from its send, and one given up sooner is cancelled at
                # the replica too, so none would renew the session.
                r = self.call("POST", f"/v1/sessions/{self.id}/heartbeat", timeout=max(every, self.lease / 2))
                self.renewed(sent, r.get("lease_ms", 0) / 1000)
            except APIError as e:
                if e.status in (403, 404):  # the session is over
                    self.lost.set()
            except Unreachable:
                pass  # no replica answered: the deadline decides

    def renewed(self, sent, lease):
        """Takes a heartbeat's answer, sent at sent: the deadline moves to
        sent + lease if later, but no later than a grant's bound if it was
        sent before that grant's answer arrived; one sent after lifts it."""
        if lease <= 0:
            return  # promises nothing
        with self.mu:
            d = sent + lease
            if self.cap is not None:
                if sent < self.cap_at:
                    d = min(d, self.cap)
                else:
                    self.cap = self.cap_at = None
            self.deadline = max(self.deadline, d)

    def grant_lease(self, sent, got, lease):
        """Takes a grant's lease_ms (lease, in seconds) from a call sent at
        sent whose answer arrived at got: the deadline becomes no later than
        sent + lease. If that comes before the next heartbeat is due, one is
        sent at once."""
        with self.mu:
            d = sent + max(lease, 0)
            self.cap = d if self.cap is None else min(self.cap, d)
            self.cap_at = got if self.cap_at is None else max(self.cap_at, got)
            self.deadline = min(self.deadline, d)
            soon = self.deadline - now() < max(min(self.ttl, self.lease) / 3, 0.01)
        if soon:
            self.wake.set()

    def holding(self):
        return not self.lost.is_set() and now() < self.deadline

    def acquire(self, name):
        """Waits in the lock's queue; returns (token, fence, first queue position).

        A watch stream that ends (its replica stopped) is reopened on
        another replica and the acquire asked again there: the API answers
        it with the request's state and never queues it twice."""
        path = "/v1/locks/" + urllib.parse.quote(name, safe="")
        position = None
        while self.holding():
            # Watch first: the stream begins with the current state, so a
            # grant between the acquire's answer and the stream's start is
            # not missed.
            try:
                watch = self.watch(path)
            except Unreachable:
                time.sleep(0.2)
                continue
            try:
                r = self.ask(path)
                if position is None:
                    position = r.get("queue_position", 0)
                for line in watch:
                    if r["granted"]:
                        return r["fencing_token"], r.get("fence", ""), position
                    line = line.decode().strip()
                    if line.startswith("data: ") and json.loads(line[6:]).get("holder_session") == self.id:
                        r = self.ask(path)
                if r["granted"]:
                    return r["fencing_token"], r.get("fence", ""), position
            except (OSError, ValueError, Unreachable):
                pass  # the stream's replica went away: ask another
            finally:
                watch.close()
        raise Unreachable("the session was lost while waiting (no heartbeat answered within its lease)")

    def ask(self, path):
        """Asks for the lock (or its request's state); an answer that grants
        bounds the deadline by its lease_ms, from this call's send (an
        answer without one, from an older server, changes nothing)."""
        sent = now()
        r = self.call("POST", path + "/acquire", {"session_id": self.id, "wait": True})
        if r.get("granted") and isinstance(r.get("lease_ms"), (int, float)):
            self.grant_lease(sent, now(), r["lease_ms"] / 1000)
        return r

    def release(self, name, token):
        path = "/v1/locks/" + urllib.parse.quote(name, safe="")
        self.call("POST", path + "/release", {"session_id": self.id, "fencing_token": token})

    def close(self):
        self.lost.set()
        self.wake.set()
        self.call("DELETE", f"/v1/sessions/{self.id}")


def main(argv=None):
    p = argparse.ArgumentParser(description="Take a fencelock lock, append a fenced line to a file, release.")
    p.add_argument("--http", default=os.environ.get("FENCELOCK_HTTP") or "http://127.0.0.1:7080",
                   help="the replicas' API base URLs, comma-separated (env FENCELOCK_HTTP; default %(default)s)")
    p.add_argument("--ttl", type=float, default=10, help="the session's TTL in seconds (default %(default)s)")
    p.add_argument("name", metavar="NAME", help="the lock, e.g. jobs/report")
    p.add_argument("out", metavar="OUT", help="the file to append to while holding the lock")
    args = p.parse_args(argv)
    bases = [b.strip() for b in args.http.split(",") if b.strip()]
    for b in bases:
        if not b.startswith(("http://", "https://")):
            p.error(f"--http {b!r} is not an http:// or https:// URL")
    try:
        s = Session(bases, int(args.ttl * 1000))
        token, fence, position = s.acquire(args.name)
        if not s.holding():
            sys.exit("fencelock_client: lost the lock before writing")
        with open(args.out, "a") as f:  # a real resource checks the fence (fencehttp: the Fencing-Token header)
            f.write(f"{token} {fence} written by session {s.id}\n")
        s.release(args.name, token)
        s.close()
    except (APIError, Unreachable) as e:
        sys.exit(f"fencelock_client: {e}")
    except OSError as e:  # a replica that stopped answering midway
        sys.exit(f"fencelock_client: {getattr(e, 'reason', e)} ({args.http})")
    except KeyboardInterrupt:
        sys.exit(130)
    print(json.dumps({"session_id": s.id, "fencing_token": token, "fence": fence, "queue_position": position}))


if __name__ == "__main__":
    main()
