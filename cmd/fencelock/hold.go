package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/httpapi"
	"github.com/fencelock/fencelock/internal/clock"
)

// holdFlags are lock's and elect's flags.
type holdFlags struct {
	clientFlags
	ttl, grace time.Duration
	graceSet   bool   // --grace was given: say so if it is lowered
	name       string // the session's name, shown as the holder
}

// defaultHolderName names a lock's or elect's session after this process,
// so that `fencelock locks` shows where the holder runs.
func defaultHolderName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

func (f *holdFlags) parse(name, argsUsage string, args []string) ([]string, []string, error) {
	fs := newFlags(name, argsUsage)
	f.register(fs)
	fs.DurationVar(&f.ttl, "ttl", 10*time.Second, "the session's TTL: the lock frees this long after this process stops heartbeating")
	fs.StringVar(&f.name, "name", defaultHolderName(), "the session's name, shown as the holder or waiter in locks, the dashboard and the HTTP views")
	fs.DurationVar(&f.grace, "grace", 2*time.Second, "CMD gets SIGTERM this long before the lease ends (at most half the lease, TTL×0.6), and SIGKILL when it ends")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	fs.Visit(func(fl *flag.Flag) { f.graceSet = f.graceSet || fl.Name == "grace" })
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

// bootNow reads the clock a holder's deadline is measured on, as the
// library's sessions do: CLOCK_BOOTTIME on Linux, which counts the time the
// machine was suspended, where Go's monotonic clock stops. A deadline on the
// monotonic clock would move later by every suspend, and the command would
// run on after the group had freed its lock.
func bootNow() clock.Instant { return clock.Boot(clock.Real) }

// maxSleep caps every wait for a deadline: the runtime's timers run on the
// monotonic clock and fire late after a suspend, so each wait is re-checked
// against the boot clock at least this often.
const maxSleep = 250 * time.Millisecond

// holder keeps an HTTP session alive and tells when it is lost: when a
// heartbeat says the session is over, or when no heartbeat was answered for
// the lease the API grants (lease_ms after the send of the last one
// answered), by the boot clock.
//
// Any replica serves the session (docs/http.md): if the one serving it
// dies, a heartbeat to another adopts it with its lock, and the command
// runs on. Only if no replica renews it (no quorum) do the heartbeats go
// unanswered, and the session is lost at its deadline: the command is
// stopped then, and lock or elect exits.
type holder struct {
	c      *client
	id     string
	home   string // the replica that created the session, named in a loss
	secret string // the session's, sent with every call acting on it
	ttl    time.Duration
	every  time.Duration // between heartbeats

	mu       sync.Mutex
	lease    time.Duration
	deadline clock.Instant
	failing  error // the last heartbeat's error, nil once one is answered
	lost     chan struct{}
	why      error
}

func (c *client) newHolder(ctx context.Context, ttl time.Duration, name string) (*holder, error) {
	sent := bootNow()
	var r httpapi.SessionResponse
	if err := c.do(ctx, "POST", "/v1/sessions", httpapi.CreateSessionRequest{TTLMillis: ttl.Milliseconds(), Name: name}, &r); err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	h := &holder{c: c, id: r.SessionID.String(), home: c.bases[c.first()], secret: r.SessionSecret,
		ttl: time.Duration(r.TimeoutMS) * time.Millisecond, lease: time.Duration(r.LeaseMS) * time.Millisecond,
		lost: make(chan struct{})}
	h.deadline = sent.Add(h.lease)
	return h, nil
}

// setGrace returns the grace to use with this session's lease, and sets the
// heartbeat period so that a healthy session's time left never falls to
// it: SIGTERM comes only when a heartbeat has gone unanswered.
func (h *holder) setGrace(grace time.Duration, said bool) time.Duration {
	if max := h.lease / 2; grace > max {
		if said {
			fmt.Fprintf(os.Stderr, "fencelock: --grace %v is over half the session's lease (%v): using %v\n", grace, h.lease, max)
		}
		grace = max
	}
	h.every = max(min(h.ttl/3, (h.lease-grace)/2), 10*time.Millisecond)
	return grace
}

// left returns the time left before the deadline by the boot clock.
func (h *holder) left() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline.Sub(bootNow())
}

func (h *holder) lose(why error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.why == nil {
		h.why = why
		close(h.lost)
	}
}

func (h *holder) reason() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.why
}

type beat struct {
	sent clock.Instant
	r    httpapi.SessionResponse
	err  error
}

// run heartbeats every h.every until ctx ends or the session is lost, to
// whichever replica answers (the others forward to the session's).
func (h *holder) run(ctx context.Context) {
	tick := time.NewTicker(h.every)
	defer tick.Stop()
	check := time.NewTimer(min(h.left(), maxSleep))
	defer check.Stop()
	answers := make(chan beat, 1)
	inFlight := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.lost:
			return
		case <-tick.C:
			if inFlight {
				break // the previous one is still out: its answer decides
			}
			inFlight = true
			go func() {
				b := beat{sent: bootNow()}
				// Each heartbeat ends before the next is due; a replica that
				// holds it leaves half of that to the others.
				bctx, cancel := context.WithTimeout(ctx, h.every)
				defer cancel()
				var attempt time.Duration
				if len(h.c.bases) > 1 {
					attempt = h.every / 2
				}
				b.err = h.c.call(bctx, attempt, h.secret, "POST", "/v1/sessions/"+h.id+"/heartbeat", nil, &b.r)
				answers <- b
			}()
		case b := <-answers:
			inFlight = false
			h.answer(b)
		case <-check.C:
		}
		left := h.left()
		if left <= 0 {
			h.mu.Lock()
			why := "no heartbeat answered within the lease (" + h.lease.String() + "): the group may free the lock from now on"
			if h.failing != nil {
				why += fmt.Sprintf("; no replica renewed the session (made on %s); last error: %v", h.home, h.failing)
			}
			h.mu.Unlock()
			h.lose(errors.New(why))
			return
		}
		check.Reset(min(left, maxSleep))
	}
}

// answer takes a heartbeat's answer: a new deadline, or why it failed.
func (h *holder) answer(b beat) {
	var ae *apiError
	if errors.As(b.err, &ae) && (ae.status == 404 || ae.status == 403) {
		h.lose(fmt.Errorf("session ended at the group: %w", b.err))
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if b.err != nil {
		if h.failing == nil {
			fmt.Fprintf(os.Stderr, "fencelock: heartbeat not answered (%v); the lease ends in %v unless one is\n",
				b.err, h.deadline.Sub(bootNow()).Round(time.Millisecond))
		}
		h.failing = b.err
		return
	}
	if h.failing != nil {
		fmt.Fprintln(os.Stderr, "fencelock: heartbeat answered again")
	}
	h.failing = nil
	// The answer's lease_ms is what it promises, for every group where the
	// session holds something (a group not renewed fails the heartbeat
	// instead, 503): one of 0 promises nothing, and extends nothing.
	lease := time.Duration(b.r.LeaseMS) * time.Millisecond
	if lease > 0 {
		h.lease = lease
	}
	if d := b.sent.Add(lease); d.After(h.deadline) {
		h.deadline = d
	}
}

// close ends the session at the group, releasing what it holds. A lost
// session is over, and one whose heartbeats fail has its replica
// unreachable: there is nothing to wait for, and the group frees its locks
// when it expires. Otherwise it waits at most until the lease ends, after
// which its replica gives the session up anyway.
func (h *holder) close() {
	select {
	case <-h.lost:
		return
	default:
	}
	h.mu.Lock()
	failing := h.failing != nil
	h.mu.Unlock()
	left := h.left()
	if failing || left <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(5*time.Second, left))
	defer cancel()
	_ = h.do(ctx, "DELETE", "/v1/sessions/"+h.id, nil, nil)
}

// do calls the API as the session's creator: with its secret.
func (h *holder) do(ctx context.Context, method, path string, in, out any) error {
	return h.c.doSession(ctx, h.secret, method, path, in, out)
}

// follow keeps a stream open on whichever replica answers, from first (open
// already), until ctx ends: a stream that ends while ctx lives (its replica
// closed or died, or it went silent) is reopened on the next replica that
// answers, and begins with the current state, so nothing but intermediate
// states is missed. The channel closes when ctx ends, or with *errp set when
// a replica refuses the stream for a reason another would share (a token
// without the read right, say).
func (c *client) follow(ctx context.Context, path string, first <-chan sseEvent, errp *error) <-chan sseEvent {
	out := make(chan sseEvent)
	go func() {
		defer close(out)
		ch := first
		backoff := 100 * time.Millisecond
		for {
			for ev := range ch {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			for {
				if ctx.Err() != nil {
					return
				}
				var err error
				if ch, err = c.stream(ctx, path); err == nil {
					backoff = 100 * time.Millisecond
					break
				}
				if ctx.Err() == nil && !failover(err) {
					*errp = err
					return
				}
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
					return
				}
				backoff = min(2*backoff, 2*time.Second)
			}
		}
	}()
	return out
}

// grantWatch is how lock and elect take their grant and follow it.
type grantWatch struct {
	what   string                                                     // "lock NAME", for messages
	stream string                                                     // the SSE path to follow
	take   func(ctx context.Context) (token, fence string, err error) // "" while queued
	mine   func(ev sseEvent, token string) (ours, held bool)          // does an event show our grant?
}

// repoll is how often a waiting command asks for its grant even without an
// event: a stream can stay open on a replica that no longer applies the
// group's entries.
const repoll = 10 * time.Second

// hold takes a grant for a new session, runs cmd while it lasts, and
// returns cmd's exit status.
//
// CMD gets SIGTERM when the lease has grace left (a heartbeat failed to
// extend it), or at once when the grant is known lost, and its process
// group SIGKILL when the lease ends by this process's boot clock, or grace
// after the SIGTERM if that is earlier. The replica gives the session up a
// margin after the lease, and only then can the group grant the lock to
// another: so the command is killed before.
func hold(f *holdFlags, gw func(h *holder) grantWatch, env func(token, fence string) []string, cmd []string) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	h, err := c.newHolder(ctx, f.ttl, f.name)
	if err != nil {
		return err
	}
	defer h.close()
	grace := h.setGrace(f.grace, f.graceSet)
	go h.run(ctx)
	w := gw(h)
	// Follow the stream from before the request, so that a grant made
	// between the request's answer and the stream's start is not missed:
	// the stream begins with the current state.
	first, err := c.stream(ctx, w.stream)
	if err != nil {
		return err
	}
	var streamErr error
	events := c.follow(ctx, w.stream, first, &streamErr)
	var again <-chan time.Time // set to ask again soon
	ahead := false             // the stream showed the grant before the request reported it
	poll := time.NewTicker(repoll)
	defer poll.Stop()
	// take asks for the grant; no replica answering is not the end of the
	// wait (the session's deadline decides that): it asks again shortly.
	take := func() (string, string, error) {
		token, fence, err := w.take(ctx)
		if err != nil && ctx.Err() == nil && failover(err) {
			fmt.Fprintf(os.Stderr, "fencelock: %v; asking again\n", err)
			again = time.After(time.Second)
			return "", "", nil
		}
		return token, fence, err
	}
	token, fence, err := take()
	for err == nil && token == "" {
		select {
		case ev, ok := <-events:
			if !ok {
				return fmt.Errorf("the watch stream ended while waiting: %w", streamErr)
			}
			if ours, _ := w.mine(ev, ""); ours {
				ahead = true
				token, fence, err = take() // the same request: it reports its grant
				if err == nil && token == "" && again == nil {
					// The stream ran ahead of the replica's answer: ask
					// again shortly, for no further event need come.
					again = time.After(50 * time.Millisecond)
				}
			}
		case <-again:
			again = nil
			token, fence, err = take()
			if err == nil && token == "" && again == nil && ahead {
				again = time.After(50 * time.Millisecond)
			}
		case <-poll.C:
			token, fence, err = take()
		case <-h.lost:
			return fmt.Errorf("session lost while waiting: %w", h.reason())
		case s := <-sigs:
			return exitError{128 + int(s.(syscall.Signal))}
		}
	}
	if err != nil {
		return err
	}
	poll.Stop()
	if h.left() <= grace {
		// Granted, but the lease is about over (the heartbeats fail): CMD
		// would be stopped as soon as it started.
		return fmt.Errorf("granted %s with %v of the lease left: not running the command", w.what, h.left())
	}

	child := exec.Command(cmd[0], cmd[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.Env = append(os.Environ(), env(token, fence)...)
	// Its own process group, so that SIGTERM reaches what a shell started.
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	signalGroup := func(s syscall.Signal) { _ = syscall.Kill(-child.Process.Pid, s) }
	lost := h.lost
	confirmed := false
	var termed clock.Instant // when CMD got our SIGTERM; zero before
	killed := false
	wake := time.NewTimer(0)
	defer wake.Stop()
	for {
		select {
		case err := <-exited:
			return exitStatus(err)
		case s := <-sigs:
			signalGroup(s.(syscall.Signal))
		case ev, ok := <-events:
			if !ok {
				events = nil // a token without read, say: the heartbeats decide
				fmt.Fprintf(os.Stderr, "fencelock: no watch stream for %s (%v): the heartbeats alone decide\n", w.what, streamErr)
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
		case <-wake.C:
		}
		now, left := bootNow(), h.left()
		if termed == (clock.Instant{}) {
			var why error
			select {
			case <-h.lost:
				why = h.reason()
			default:
				if left <= grace {
					why = fmt.Errorf("the lease ends in %v and no heartbeat was answered to extend it", left.Round(time.Millisecond))
				}
			}
			if why != nil {
				fmt.Fprintf(os.Stderr, "fencelock: lost %s: %v; sending SIGTERM to the command\n", w.what, why)
				signalGroup(syscall.SIGTERM)
				termed = now
			}
		}
		if termed != (clock.Instant{}) && !killed {
			// At the end of the lease at the latest: the deadline cannot
			// move later than it was when the SIGTERM went, as the lease
			// was running out or lost then.
			until := min(left, termed.Add(grace).Sub(now))
			if until <= 0 {
				fmt.Fprintf(os.Stderr, "fencelock: %s: the command did not exit; sending SIGKILL to its process group\n", w.what)
				signalGroup(syscall.SIGKILL)
				killed = true
			} else {
				wake.Reset(min(until, maxSleep))
				continue
			}
		}
		if !killed {
			wake.Reset(max(min(left-grace, maxSleep), time.Millisecond))
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
	position := -1
	return hold(&f, func(h *holder) grantWatch {
		return grantWatch{
			what:   "lock " + name,
			stream: path + "/watch",
			take: func(ctx context.Context) (string, string, error) {
				var r httpapi.AcquireResponse
				if err := h.do(ctx, "POST", path+"/acquire", httpapi.AcquireRequest{SessionID: mustID(h.id), Wait: true}, &r); err != nil {
					return "", "", fmt.Errorf("acquire %s: %w", name, err)
				}
				if !r.Granted {
					if r.QueuePosition != position {
						position = r.QueuePosition
						fmt.Fprintf(os.Stderr, "fencelock: waiting for %s (position %d)\n", name, r.QueuePosition)
					}
					return "", "", nil
				}
				return r.FencingToken.String(), r.Fence, nil
			},
			mine: func(ev sseEvent, token string) (bool, bool) {
				var e httpapi.LockEvent
				_ = json.Unmarshal(ev.Data, &e)
				ours := e.Held && e.HolderSession.String() == h.id
				return ours, ours && (token == "" || e.FencingToken.String() == token)
			},
		}
	}, func(token, fence string) []string {
		return []string{"FENCELOCK_TOKEN=" + token, "FENCELOCK_FENCE=" + fence, "FENCELOCK_LOCK=" + name}
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
	position := -1
	return hold(&f, func(h *holder) grantWatch {
		return grantWatch{
			what:   "leadership of " + name,
			stream: path + "/observe",
			take: func(ctx context.Context) (string, string, error) {
				var r httpapi.CampaignResponse
				if err := h.do(ctx, "POST", path+"/campaign", httpapi.CampaignRequest{SessionID: mustID(h.id), Value: value, Wait: true}, &r); err != nil {
					return "", "", fmt.Errorf("campaign %s: %w", name, err)
				}
				if !r.Elected {
					if r.QueuePosition != position {
						position = r.QueuePosition
						fmt.Fprintf(os.Stderr, "fencelock: waiting to lead %s (position %d)\n", name, r.QueuePosition)
					}
					return "", "", nil
				}
				return r.Token.String(), r.Fence, nil
			},
			mine: func(ev sseEvent, token string) (bool, bool) {
				var e httpapi.ObserveEvent
				_ = json.Unmarshal(ev.Data, &e)
				ours := e.Leader != nil && e.Leader.SessionID.String() == h.id
				return ours, ours && (token == "" || e.Leader.Token.String() == token)
			},
		}
	}, func(token, fence string) []string {
		return []string{"FENCELOCK_TOKEN=" + token, "FENCELOCK_FENCE=" + fence, "FENCELOCK_ELECTION=" + name}
	}, cmd)
}

func mustID(s string) httpapi.ID {
	var id httpapi.ID
	_ = id.UnmarshalJSON([]byte(s))
	return id
}
