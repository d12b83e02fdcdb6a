package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/lockapi"
)

// Inspect returns the lock's state as the group sees it (GET
// /v1/locks/{name}, a linearizable read on the replica): its holders with
// their tokens and its whole queue. It fails with ErrInvalidName for a bad
// name, ErrUnknownGroup for a group the deployment does not run, and an
// error wrapping ErrUnavailable when no endpoint answered.
func (c *Client) Inspect(ctx context.Context, name string) (lockapi.LockInfo, error) {
	var l lockJSON
	if err := c.getNamed(ctx, "/v1/locks/", name, &l); err != nil {
		return lockapi.LockInfo{}, err
	}
	info := lockInfoOf(l)
	info.Name = name
	return info, nil
}

// Leader returns the election's current leader (GET /v1/elections/{name}),
// or an error wrapping ErrNoLeader when it has none.
func (c *Client) Leader(ctx context.Context, election string) (lockapi.LeaderInfo, error) {
	var e electionJSON
	if err := c.getNamed(ctx, "/v1/elections/", election, &e); err != nil {
		return lockapi.LeaderInfo{}, err
	}
	li := leaderInfoOf(e.Leader, election)
	if li.Token == 0 {
		return li, fmt.Errorf("%w: %q", lockapi.ErrNoLeader, clean(election, 64))
	}
	return li, nil
}

// getNamed reads GET prefix+name into out, once name is one the API takes
// (see invalidName).
func (c *Client) getNamed(ctx context.Context, prefix, name string, out any) error {
	if err := invalidName(name); err != nil {
		return err
	}
	return c.call(ctx, callSpec{method: "GET", path: prefix + url.PathEscape(name)}, out)
}

// invalidName is the error of a name the API refuses, wrapping
// ErrInvalidName with the name (cut short) and why; nil for a good name.
// A bad name fails before any call.
func invalidName(name string) error {
	if why := lockapi.NameProblem(name); why != "" {
		return fmt.Errorf("%w: %q: %s", lockapi.ErrInvalidName, clean(name, 64), why)
	}
	return nil
}

// Stream bounds: a stream's headers must come within streamOpen (the
// replica starts it with a linearizable read), and one that carries
// nothing, not even the API's ping every 15s, for streamIdle is taken for a
// replica that stopped answering and reopened elsewhere.
var (
	streamOpen = 10 * time.Second
	streamIdle = 40 * time.Second
)

// Observe reports the election's leader as the group changes it: first the
// current leader, then each change (an election without a leader as a
// LeaderInfo with Token 0). Like the embedded Node.Observe it may skip
// intermediate states but the value waiting to be received is always the
// latest known. The stream follows the endpoints: one that ends or goes
// silent is reopened on the next that answers, and begins with the current
// state. The channel is closed when ctx ends or the Client closes; for a
// name the API refuses (ErrInvalidName, ErrUnknownGroup, no read right) it
// carries one LeaderInfo whose Err says why, and is closed.
func (c *Client) Observe(ctx context.Context, election string) <-chan lockapi.LeaderInfo {
	fail := func(err error) lockapi.LeaderInfo { return lockapi.LeaderInfo{Election: election, Err: err} }
	path := "/v1/elections/" + url.PathEscape(election) + "/observe"
	return followLatest(ctx, c, election, path, fail, []string{"state", "leader", "no_leader", "proclaimed"},
		func(data []byte) (lockapi.LeaderInfo, error) {
			var oe observeEvent
			if err := json.Unmarshal(data, &oe); err != nil {
				return lockapi.LeaderInfo{}, err
			}
			return leaderInfoOf(oe.Leader, election), nil
		})
}

// Watch reports lock name as the group changes it: first its state, then
// each change (granted, released, expired, revoked, a waiter queued or
// gone), as the embedded Node.Watch does; it may skip intermediate states
// but the value waiting to be received is always the latest known, and
// Queue and Waiting are not listed (Waiters counts them). The stream follows
// the endpoints: one that ends or goes silent is reopened on the next that
// answers, and begins with the current state. The channel is closed when
// ctx ends or the Client closes; for a name the API refuses
// (ErrInvalidName, ErrUnknownGroup, no read right) it carries one LockInfo
// whose Err says why, and is closed.
func (c *Client) Watch(ctx context.Context, name string) <-chan lockapi.LockInfo {
	fail := func(err error) lockapi.LockInfo { return lockapi.LockInfo{Name: name, Err: err} }
	return followLatest(ctx, c, name, lockPath(name, "watch"), fail, []string{"state", "granted", "released", "expired", "revoked", "queue"},
		func(data []byte) (lockapi.LockInfo, error) {
			var l lockJSON
			if err := json.Unmarshal(data, &l); err != nil {
				return lockapi.LockInfo{}, err
			}
			info := lockInfoOf(l)
			info.Name = name
			info.Queue, info.Waiting = nil, nil
			return info, nil
		})
}

// followLatest is Observe's and Watch's common body. For an invalid name or
// a closed Client the channel carries fail(why) and is closed. Otherwise a
// goroutine follows the stream at path, reopening it (with a backoff of
// 100ms doubling up to 5s) until ctx ends or the Client closes: an event of
// one of kinds becomes decode(its data) (undecodable data reopens the
// stream), an "error" event or a refusal the API will not fail over
// becomes fail(that error) and ends it. The channel holds only the latest
// value.
func followLatest[T any](ctx context.Context, c *Client, name, path string, fail func(error) T, kinds []string,
	decode func(data []byte) (T, error)) <-chan T {
	out := make(chan T, 1)
	if err := invalidName(name); err != nil {
		out <- fail(err)
		close(out)
		return out
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		out <- fail(fmt.Errorf("%w: the client was closed", lockapi.ErrClosed))
		close(out)
		return out
	}
	c.wg.Add(1) // under c.mu: Close waits only once no more can start
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer c.wg.Done()
		defer cancel()
		defer close(out)
		stop := context.AfterFunc(c.ctx, cancel)
		defer stop()
		// latest keeps only the newest value for the receiver.
		latest := func(v T) {
			select {
			case <-out:
			default:
			}
			out <- v
		}
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			err := c.follow(ctx, path, func(ev sseEvent) bool {
				backoff = 100 * time.Millisecond
				switch {
				case slices.Contains(kinds, ev.kind):
					v, err := decode(ev.data)
					if err != nil {
						return false // garbage: reopen
					}
					latest(v)
				case ev.kind == "error":
					var ee errorEvent
					_ = json.Unmarshal(ev.data, &ee)
					latest(fail(&Error{Status: 200, Code: clean(ee.Code, 64), Message: clean(ee.Message, 4096)}))
					cancel()
					return false
				}
				return true
			})
			var e *Error
			if errors.As(err, &e) && !failover(err) {
				latest(fail(err))
				return
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}()
	return out
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	kind string
	data []byte
}

// follow opens the stream on the endpoints in turn and passes its events to
// emit until the stream ends, emit returns false or ctx ends. The error is
// the last endpoint's when none opened it (an *Error for an answer).
func (c *Client) follow(ctx context.Context, path string, emit func(sseEvent) bool) error {
	var last error
	for _, i := range c.order() {
		body, stop, err := c.openStream(ctx, c.bases[i], path)
		if err != nil {
			last = err
			if ctx.Err() != nil || !failover(err) {
				return err
			}
			continue
		}
		c.answered(i)
		scanEvents(body, stop, emit)
		return nil
	}
	return last
}

// openStream opens one stream; stop must be called when done with body.
// The returned touch-based watchdog ends a stream that goes silent.
func (c *Client) openStream(ctx context.Context, base, path string) (io.Reader, func(bool), error) {
	sctx, cancel := context.WithCancel(ctx)
	// Cancelling the request is the one way to give up on a body that
	// stops arriving: the watchdog does it when nothing came in time.
	watchdog := time.AfterFunc(streamOpen, cancel)
	req, err := http.NewRequestWithContext(sctx, "GET", base+path, nil)
	if err != nil {
		watchdog.Stop()
		cancel()
		return nil, nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	c.auth(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		watchdog.Stop()
		cancel()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		watchdog.Stop()
		cancel()
		return nil, nil, decodeError(resp.StatusCode, b, false, base)
	}
	watchdog.Reset(streamIdle)
	done := func(more bool) {
		if more {
			watchdog.Reset(streamIdle)
			return
		}
		watchdog.Stop()
		resp.Body.Close()
		cancel()
	}
	return resp.Body, done, nil
}

// scanEvents reads Server-Sent Events from r until it ends, fails, or emit
// returns false; touch(true) is called for every line read, pings
// included, and touch(false) at the end. Lines over 1 MiB end the stream
// (the API's largest event is far smaller). Events without an event: line
// are skipped; other lines (": ping") are ignored.
func scanEvents(r io.Reader, touch func(bool), emit func(sseEvent) bool) {
	defer touch(false)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var ev sseEvent
	for sc.Scan() {
		touch(true)
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "event:"):
			ev.kind = strings.TrimSpace(l[len("event:"):])
		case strings.HasPrefix(l, "data:"):
			ev.data = append(ev.data, strings.TrimPrefix(l[len("data:"):], " ")...)
		case l == "":
			if ev.kind != "" && !emit(ev) {
				return
			}
			ev = sseEvent{}
		}
	}
}
