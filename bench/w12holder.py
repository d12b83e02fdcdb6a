#!/usr/bin/env python3
"""W12's Python holder (bench/w12.go runs it): with the stdlib-only client of
examples/python, opens a session on the replicas, takes a lock and holds it
until a stop file exists, then releases it and exits 0. While it holds, it
writes its fencing token to a heartbeat file every 100 ms; it exits 3 as soon
as its session says the lock is no longer safely held (lost, or its lease ran
out by its own clock), 4 on any other error.

    w12holder.py LIBDIR URL[,URL...] NAME TTL_SECONDS STOPFILE HEARTBEATFILE
"""
import os, sys, time


def main():
    libdir, urls, name, ttl, stop, hb = sys.argv[1:7]
    sys.path.insert(0, libdir)
    import fencelock_client as fc

    s = fc.Session([u for u in urls.split(",") if u], int(float(ttl) * 1000))
    token, fence, _ = s.acquire(name)
    while not os.path.exists(stop):
        if not s.holding():
            why = "the group ended the session" if s.lost.is_set() else "no heartbeat answered within the lease"
            print(f"w12holder: lost {name} (token {token}): {why}", flush=True)
            sys.exit(3)
        with open(hb + ".tmp", "w") as f:
            f.write(f"{token} {time.time()}\n")
        os.replace(hb + ".tmp", hb)
        time.sleep(0.1)
    s.release(name, token)
    s.close()
    print(f"w12holder: released {name} (token {token})", flush=True)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException as e:  # any failure is this holder's end: say which
        print(f"w12holder: {type(e).__name__}: {e}", flush=True)
        sys.exit(4)
