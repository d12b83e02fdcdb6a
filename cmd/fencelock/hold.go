package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/httpapi"
)

// holdFlags are lock's and elect's flags.
type holdFlags struct {
	clientFlags
	ttl, grace time.Duration
}

func (f *holdFlags) parse(name, argsUsage string, args []string) ([]string, []string, error) {
	fs := newFlags(name, argsUsage)
	f.register(fs)
	fs.DurationVar(&f.ttl, "ttl", 10*time.Second, "the session's TTL: the lock frees this long after this process stops heartbeating")
	fs.DurationVar(&f.grace, "grace", 5*time.Second, "after the lock is lost, how long CMD has between SIGTERM and SIGKILL")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	// The flag package stops at "--" (and at the first non-flag): what is
	// before it are our operands, what is after it the command.
	rest := fs.Args()
	var ops, cmd []string
	for i, a := range rest {
		if a == "--" {
			ops, cmd = rest[:i], rest[i+1:]
			break
		}
	}
	if len(cmd) == 0 {
		fs.Usage()
		return nil, nil, fmt.Errorf("%s: no command given after --", name)
	}
	if f.grace < 0 {
		return nil, nil, fmt.Errorf("%s: --grace must not be negative", name)
	}
	return ops, cmd, nil
}

// holder keeps an HTTP session alive and tells when it is lost: when a
// heartbeat says the session is over, or when no heartbeat was answered for
// the lease the API grants (lease_ms after the send of the last one
// answered), by this process's monotonic clock.
type holder struct {
	c      *client
	id     string
	secret string // the session's, sent with every call acting on it
	ttl    time.Duration
	lease  time.Duration

	mu       sync.Mutex
	deadline time.Time
	lost     chan struct{}
	why      error
}

func (c *client) newHolder(ctx context.Context, ttl time.Duration) (*holder, error) {
	sent := time.Now()
	var r httpapi.SessionResponse
	if err := c.do(ctx, "POST", "/v1/sessions", httpapi.CreateSessionRequest{TTLMillis: ttl.Milliseconds()}, &r); err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	h := &holder{c: c, id: r.SessionID.String(), secret: r.SessionSecret, ttl: time.Duration(r.TimeoutMS) * time.Millisecond,
		lease: time.Duration(r.LeaseMS) * time.Millisecond, lost: make(chan struct{})}
	h.deadline = sent.Add(h.lease)
	return h, nil
}

func (h *holder) lose(why error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.why == nil {
		h.why = why
		close(h.lost)
	}
}

// run heartbeats every TTL/3 until ctx ends or the session is lost.
func (h *holder) run(ctx context.Context) {
	beat := time.NewTicker(h.ttl / 3)
	defer beat.Stop()
	check := time.NewTimer(time.Until(h.deadline))
	defer check.Stop()
	answers := make(chan time.Time, 1)
	inFlight := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.lost:
			return
		case <-beat.C:
			if inFlight {
				continue // the previous one is still out: its answer decides
			}
			inFlight = true
			go func() {
				sent := time.Now()
				bctx, cancel := context.WithTimeout(ctx, h.ttl/3)
				defer cancel()
				err := h.do(bctx, "POST", "/v1/sessions/"+h.id+"/heartbeat", nil, nil)
				var ae *apiError
				if errors.As(err, &ae) && ae.status == 404 {
					h.lose(fmt.Errorf("session ended at the group: %w", err))
				}
				if err != nil {
					sent = time.Time{}
				}
				answers <- sent
			}()
		case sent := <-answers:
			inFlight = false
			if !sent.IsZero() {
				h.mu.Lock()
				if d := sent.Add(h.lease); d.After(h.deadline) {
					h.deadline = d
				}
				h.mu.Unlock()
			}
		case <-check.C:
		}
		h.mu.Lock()
		left := time.Until(h.deadline)
		h.mu.Unlock()
		if left <= 0 {
			h.lose(errors.New("no heartbeat answered within the lease: the group may have freed the lock"))
			return
		}
		check.Reset(left)
	}
}

// close ends the session at the group, releasing what it holds. A lost
// session is over or its replica unreachable: there is nothing to wait for.
func (h *holder) close() {
	select {
	case <-h.lost:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.do(ctx, "DELETE", "/v1/sessions/"+h.id, nil, nil)
}

// do calls the API as the session's creator: with its secret.
func (h *holder) do(ctx context.Context, method, path string, in, out any) error {
	return h.c.doSession(ctx, h.secret, method, path, in, out)
}

// grantWatch is how lock and elect take their grant and follow it.
type grantWatch struct {
	what   string                                              // "lock NAME", for messages
	stream string                                              // the SSE path to follow
	take   func(ctx context.Context) (token string, err error) // "" while queued
	mine   func(ev sseEvent, token string) (ours, held bool)   // does an event show our grant?
}

// hold takes a grant for a new session, runs cmd while it lasts, and
// returns cmd's exit status.
func hold(f *holdFlags, gw func(h *holder) grantWatch, env func(token string) []string, cmd []string) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	h, err := c.newHolder(ctx, f.ttl)
	if err != nil {
		return err
	}
	defer h.close()
	go h.run(ctx)
	w := gw(h)
	// Follow the stream from before the request, so that a grant made
	// between the request's answer and the stream's start is not missed:
	// the stream begins with the current state.
	events, err := c.stream(ctx, w.stream)
	if err != nil {
		return err
	}
	token, err := w.take(ctx)
	var again <-chan time.Time // set while the stream shows a grant the request has not reported
	for err == nil && token == "" {
		select {
		case ev, ok := <-events:
			if !ok {
				return errors.New("the watch stream ended while waiting")
			}
			if ours, _ := w.mine(ev, ""); ours {
				token, err = w.take(ctx) // the same request: it reports its grant
				if err == nil && token == "" {
					// The stream ran ahead of the replica's answer: ask
					// again shortly, for no further event need come.
					again = time.After(50 * time.Millisecond)
				}
			}
		case <-again:
			token, err = w.take(ctx)
			if err == nil && token == "" {
				again = time.After(50 * time.Millisecond)
			}
		case <-h.lost:
			return fmt.Errorf("session lost while waiting: %w", h.why)
		case s := <-sigs:
			return exitError{128 + int(s.(syscall.Signal))}
		}
	}
	if err != nil {
		return err
	}

	child := exec.Command(cmd[0], cmd[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.Env = append(os.Environ(), env(token)...)
	// Its own process group, so that SIGTERM reaches what a shell started.
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	signalGroup := func(s syscall.Signal) { _ = syscall.Kill(-child.Process.Pid, s) }
	var kill <-chan time.Time
	lost := h.lost
	confirmed := false
	for {
		select {
		case err := <-exited:
			return exitStatus(err)
		case s := <-sigs:
			signalGroup(s.(syscall.Signal))
		case ev, ok := <-events:
			if !ok {
				events = nil // the replica went: the heartbeats decide
				continue
			}
			// Events from before the grant (the stream's first state, the
			// queue) show someone else: only once one has shown this grant
			// does a later one without it mean the grant ended.
			if _, held := w.mine(ev, token); held {
				confirmed = true
			} else if confirmed {
				h.lose(errors.New("the grant ended at the group (" + ev.Kind + ")"))
			}
		case <-lost:
			lost = nil
			fmt.Fprintf(os.Stderr, "fencelock: lost %s: %v; sending SIGTERM to the command\n", w.what, h.why)
			signalGroup(syscall.SIGTERM)
			kill = time.After(f.grace)
		case <-kill:
			signalGroup(syscall.SIGKILL)
		}
	}
}

// exitStatus turns the command's end into ours: its status, or 128+N for a
// signal N, as shells report it.
func exitStatus(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exitError{128 + int(ws.Signal())}
		}
		return exitError{ee.ExitCode()}
	}
	return err
}

func lockCmd(args []string) error {
	var f holdFlags
	ops, cmd, err := f.parse("lock", "[flags] NAME -- CMD [ARGS...]", args)
	if err != nil {
		return err
	}
	if len(ops) != 1 {
		return fmt.Errorf("lock: want one lock NAME before --, got %d operands", len(ops))
	}
	name := ops[0]
	path := "/v1/locks/" + url.PathEscape(name)
	return hold(&f, func(h *holder) grantWatch {
		return grantWatch{
			what:   "lock " + name,
			stream: path + "/watch",
			take: func(ctx context.Context) (string, error) {
				var r httpapi.AcquireResponse
				if err := h.do(ctx, "POST", path+"/acquire", httpapi.AcquireRequest{SessionID: mustID(h.id), Wait: true}, &r); err != nil {
					return "", fmt.Errorf("acquire %s: %w", name, err)
				}
				if !r.Granted {
					fmt.Fprintf(os.Stderr, "fencelock: waiting for %s (position %d)\n", name, r.QueuePosition)
					return "", nil
				}
				return r.FencingToken.String(), nil
			},
			mine: func(ev sseEvent, token string) (bool, bool) {
				var e httpapi.LockEvent
				_ = json.Unmarshal(ev.Data, &e)
				ours := e.Held && e.HolderSession.String() == h.id
				return ours, ours && (token == "" || e.FencingToken.String() == token)
			},
		}
	}, func(token string) []string {
		return []string{"FENCELOCK_TOKEN=" + token, "FENCELOCK_LOCK=" + name}
	}, cmd)
}

func electCmd(args []string) error {
	var f holdFlags
	ops, cmd, err := f.parse("elect", "[flags] NAME VALUE -- CMD [ARGS...]", args)
	if err != nil {
		return err
	}
	if len(ops) != 2 {
		return fmt.Errorf("elect: want NAME VALUE before --, got %d operands", len(ops))
	}
	name, value := ops[0], ops[1]
	path := "/v1/elections/" + url.PathEscape(name)
	return hold(&f, func(h *holder) grantWatch {
		return grantWatch{
			what:   "leadership of " + name,
			stream: path + "/observe",
			take: func(ctx context.Context) (string, error) {
				var r httpapi.CampaignResponse
				if err := h.do(ctx, "POST", path+"/campaign", httpapi.CampaignRequest{SessionID: mustID(h.id), Value: value, Wait: true}, &r); err != nil {
					return "", fmt.Errorf("campaign %s: %w", name, err)
				}
				if !r.Elected {
					fmt.Fprintf(os.Stderr, "fencelock: waiting to lead %s (position %d)\n", name, r.QueuePosition)
					return "", nil
				}
				return r.Token.String(), nil
			},
			mine: func(ev sseEvent, token string) (bool, bool) {
				var e httpapi.ObserveEvent
				_ = json.Unmarshal(ev.Data, &e)
				ours := e.Leader != nil && e.Leader.SessionID.String() == h.id
				return ours, ours && (token == "" || e.Leader.Token.String() == token)
			},
		}
	}, func(token string) []string {
		return []string{"FENCELOCK_TOKEN=" + token, "FENCELOCK_ELECTION=" + name}
	}, cmd)
}

func mustID(s string) httpapi.ID {
	var id httpapi.ID
	_ = id.UnmarshalJSON([]byte(s))
	return id
}
