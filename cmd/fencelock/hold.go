package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	apiclient "github.com/fencelock/fencelock/client"
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

// parse reads lock's and elect's command line: flags anywhere before the
// command, the n operands (NAME, or NAME VALUE), then the command, either
// after "--" (`lock NAME --ttl 5s -- CMD ARGS`) or, as consul lock and
// etcdctl lock take it, right after the operands (`lock NAME CMD ARGS`): the
// first word after the operands that is not a flag starts the command, and
// everything from there on is the command's, flags included.
func (f *holdFlags) parse(name, argsUsage string, n int, args []string) ([]string, []string, error) {
	fs := newFlags(name, argsUsage)
	f.register(fs)
	fs.DurationVar(&f.ttl, "ttl", 10*time.Second, "the session's TTL: the lock frees this long after this process stops heartbeating")
	fs.StringVar(&f.name, "name", defaultHolderName(), "the session's name, shown as the holder or waiter in locks, the dashboard and the HTTP views")
	fs.DurationVar(&f.grace, "grace", 2*time.Second, "CMD gets SIGTERM this long before the lease ends (at most half the lease, TTL×0.6), and SIGKILL when it ends")
	var ops []string
	for {
		dash, err := parseUntilOperand(fs, args)
		if err != nil {
			return nil, nil, err
		}
		args = fs.Args()
		if len(ops) == n {
			if len(args) == 0 {
				return nil, nil, fmt.Errorf("%s: no command to run: type it after %s, as in: fencelock %s %s -- CMD [ARGS...]",
					name, strings.Join(ops, " "), name, strings.Join(ops, " "))
			}
			break // args is the command, after "--" or from its first word
		}
		if dash || len(args) == 0 {
			return nil, nil, fmt.Errorf("%s: want %s before the command, got %s (%s)", name, operandWords(n), countWords(len(ops), "operand"), hint(name, n))
		}
		ops, args = append(ops, args[0]), args[1:]
	}
	fs.Visit(func(fl *flag.Flag) { f.graceSet = f.graceSet || fl.Name == "grace" })
	if f.grace < 0 {
		return nil, nil, fmt.Errorf("%s: --grace %v: must not be negative", name, f.grace)
	}
	return ops, args, nil
}

// parseUntilOperand parses fs's flags at the front of args, up to the first
// operand or "--"; dash reports that it stopped at (and took) a "--".
func parseUntilOperand(fs *flag.FlagSet, args []string) (dash bool, err error) {
	if err := parseFlags(fs, args); err != nil {
		return false, err
	}
	left := fs.Args()
	taken := len(args) - len(left)
	return taken > 0 && args[taken-1] == "--", nil
}

func operandWords(n int) string {
	if n == 1 {
		return "one lock NAME"
	}
	return "NAME VALUE"
}

func countWords(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func hint(name string, n int) string {
	if n == 1 {
		return "fencelock " + name + " [flags] NAME [--] CMD [ARGS...]"
	}
	return "fencelock " + name + " [flags] NAME VALUE [--] CMD [ARGS...]"
}

// bootNow reads the clock the session's deadline is measured on
// (client.Session.LeaseLeft): CLOCK_BOOTTIME on Linux, which counts the time
// the machine was suspended, where Go's monotonic clock stops; the grace
// after a SIGTERM is timed on it too.
func bootNow() clock.Instant { return clock.Boot(clock.Real) }

// maxSleep caps every wait for a deadline: the runtime's timers run on the
// monotonic clock and fire late after a suspend, so each wait is re-checked
// against the session's boot clock (LeaseLeft) at least this often.
const maxSleep = 250 * time.Millisecond

// grantKind is how lock and elect take their grant and follow it.
type grantKind struct {
	what string // "lock NAME", for messages
	// take waits for the grant of session s; ctx ending withdraws the
	// request.
	take func(ctx context.Context, s *apiclient.Session) (heldGrant, error)
	// watch follows the grant at the group: each value says whether the
	// group shows it (session sid, token) held, or why the stream ended
	// (err, then the channel closes).
	watch func(ctx context.Context, c *apiclient.Client, sid, token uint64) <-chan shown
	// env is what CMD gets in its environment.
	env func(g heldGrant) []string
}

// shownAs reports whether a view's session ID, with this session's
// token, shows this session's grant: its ID, or 0, a part of a named
// group the group does not know the session of (opened before it wrote
// log version 10), whose token, unique in its group, says whose it is.
func shownAs(shown, sid uint64) bool { return shown == sid || shown == 0 }

// heldGrant is a lock's or a leadership's grant.
type heldGrant interface {
	Token() uint64
	Fence() fencelock.Fence
	Done() <-chan struct{}
	Err() error
}

// shown is one state of a grant as a watch stream shows it.
type shown struct {
	held bool
	err  error
}

// graceFor returns the grace to use with a lease, said on stderr when it
// is lowered, and the heartbeat period that keeps a healthy session's time
// left above it: SIGTERM comes only when a heartbeat has gone unanswered.
func graceFor(grace, lease, ttl time.Duration, said bool) (time.Duration, time.Duration) {
	if max := lease / 2; grace > max {
		if said {
			fmt.Fprintf(os.Stderr, "fencelock: --grace %v is over half the session's lease (%v): using %v\n", grace, lease, max)
		}
		grace = max
	}
	every := max(min(ttl/3, (lease-grace)/2), apiclient.MinHeartbeatPeriod)
	return grace, min(every, max(lease/2, apiclient.MinHeartbeatPeriod))
}

// beats reports the session's heartbeats on stderr: the first that goes
// unanswered, with the time left, and the first answered after; and keeps
// the last error, for the message of a loss.
type beats struct {
	mu   sync.Mutex
	last error // the last heartbeat's error, nil once one is answered
}

func (b *beats) report(err error, left time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if b.last == nil && !errors.Is(err, fencelock.ErrSessionExpired) {
			fmt.Fprintf(os.Stderr, "fencelock: heartbeat not answered (%v); the lease ends in %v unless one is\n",
				err, left.Round(time.Millisecond))
		}
		b.last = err
		return
	}
	if b.last != nil {
		fmt.Fprintln(os.Stderr, "fencelock: heartbeat answered again")
	}
	b.last = nil
}

func (b *beats) failing() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// lossOf is why the session is over, with the last heartbeat's error.
func lossOf(s *apiclient.Session, b *beats) error {
	err := s.Err()
	if err == nil {
		return nil
	}
	if last := b.failing(); last != nil && !errors.Is(last, fencelock.ErrSessionExpired) {
		return fmt.Errorf("%w; no replica renewed the session; last error: %v", err, last)
	}
	return err
}

// hold takes a grant for a new client.Session, runs cmd while it lasts,
// and returns cmd's exit status.
//
// The session heartbeats on its own, to whichever replica answers, and
// its deadline (LeaseLeft) is lease_ms after the send of the last heartbeat
// a replica answered OK, by this process's boot clock. CMD gets SIGTERM
// when the lease has grace left (a heartbeat failed to extend it), or at
// once when the grant is known lost (the session ended, or the watch shows
// the grant ended), and its process group SIGKILL when the lease ends, or
// grace after the SIGTERM if that is earlier. The replica gives the session
// up a margin after the lease, and only then can the group grant the lock
// to another: so the command is killed before.
func hold(f *holdFlags, k grantKind, cmd []string) error {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	octx, ocancel := context.WithTimeout(ctx, 15*time.Second)
	c, err := f.apiClient(octx)
	if err != nil {
		ocancel()
		return err
	}
	defer c.Close()
	s, err := c.NewSession(octx, fencelock.WithTTL(f.ttl), fencelock.WithSessionName(f.name))
	ocancel()
	if err != nil {
		return fmt.Errorf("open session: %w", err)
	}
	var b beats
	s.OnHeartbeat(b.report)
	grace, every := graceFor(f.grace, s.Lease(), s.TTL(), f.graceSet)
	if err := s.SetHeartbeatPeriod(every); err != nil {
		return err
	}
	defer func() {
		// Ends the session at the group, releasing what it holds, waiting
		// at most until the lease ends, after which the replica gives the
		// session up anyway. One whose heartbeats fail has no replica to
		// tell: it is ended here only (a Close whose context is over asks
		// nothing), so that neither this nor the client's Close keeps lock
		// from exiting; the group frees its locks when it expires.
		var cctx context.Context
		var cancel context.CancelFunc
		if left := s.LeaseLeft(); b.failing() == nil && left > 0 {
			cctx, cancel = context.WithTimeout(context.Background(), min(5*time.Second, left))
		} else {
			cctx, cancel = context.WithCancel(context.Background())
			cancel()
		}
		_ = s.Close(cctx)
		cancel()
	}()

	// Wait for the grant, or the session's end, or a signal.
	type taken struct {
		g   heldGrant
		err error
	}
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	got := make(chan taken, 1)
	go func() {
		g, err := k.take(tctx, s)
		got <- taken{g, err}
	}()
	var g heldGrant
	select {
	case t := <-got:
		if t.err != nil {
			if s.Err() != nil {
				return fmt.Errorf("session lost while waiting: %w", lossOf(s, &b))
			}
			return t.err
		}
		g = t.g
	case <-s.Done():
		tcancel()
		<-got
		return fmt.Errorf("session lost while waiting: %w", lossOf(s, &b))
	case sig := <-sigs:
		tcancel()
		<-got // the request is withdrawn (a grant that raced it released)
		return exitError{128 + int(sig.(syscall.Signal))}
	}
	if err := leaseBeyondGrace(ctx, s, grace); err != nil {
		return fmt.Errorf("granted %s, but %w: not running the command", k.what, err)
	}
	// Follow the grant at the group, so that one it ended (revoked, say) is
	// known at once rather than at the lease's end.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	events := k.watch(wctx, c, s.ID(), g.Token())

	child := exec.Command(cmd[0], cmd[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.Env = append(os.Environ(), k.env(g)...)
	// Its own process group, so that SIGTERM reaches what a shell started.
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	signalGroup := func(s syscall.Signal) { _ = syscall.Kill(-child.Process.Pid, s) }
	lost := g.Done()
	var lostWhy error // the grant ended at the group, as the watch showed
	confirmed := false
	var termed clock.Instant // when CMD got our SIGTERM, by the boot clock; zero before
	killed := false
	wake := time.NewTimer(0)
	defer wake.Stop()
	for {
		select {
		case err := <-exited:
			return exitStatus(err)
		case sig := <-sigs:
			signalGroup(sig.(syscall.Signal))
		case ev, ok := <-events:
			if !ok || ev.err != nil {
				events = nil // a token without read, say: the heartbeats decide
				if ev.err != nil {
					fmt.Fprintf(os.Stderr, "fencelock: no watch stream for %s (%v): the heartbeats alone decide\n", k.what, ev.err)
				}
				continue
			}
			// Events from before the grant showed someone else: only once
			// one has shown this grant does a later one without it mean
			// the grant ended.
			if ev.held {
				confirmed = true
			} else if confirmed && lostWhy == nil {
				lostWhy = errors.New("the grant ended at the group")
			}
		case <-lost:
			lost = nil
		case <-wake.C:
		}
		left := s.LeaseLeft()
		now := bootNow()
		if termed == (clock.Instant{}) {
			var why error
			switch {
			case lostWhy != nil:
				why = lostWhy
			case g.Err() != nil:
				why = g.Err()
				if s.Err() != nil {
					why = lossOf(s, &b)
				}
			case left <= grace:
				why = fmt.Errorf("the lease ends in %v and no heartbeat was answered to extend it", left.Round(time.Millisecond))
				if last := b.failing(); last != nil {
					why = fmt.Errorf("%w; last error: %v", why, last)
				}
			}
			if why != nil {
				fmt.Fprintf(os.Stderr, "fencelock: lost %s: %v; sending SIGTERM to the command\n", k.what, why)
				signalGroup(syscall.SIGTERM)
				termed = now
			}
		}
		if termed != (clock.Instant{}) && !killed {
			// At the end of the lease at the latest (LeaseLeft, on the
			// boot clock), or grace after the SIGTERM: the deadline cannot
			// move later than it was when the SIGTERM went, as the lease
			// was running out or lost then.
			until := min(left, termed.Add(grace).Sub(now))
			if until <= 0 {
				fmt.Fprintf(os.Stderr, "fencelock: %s: the command did not exit; sending SIGKILL to its process group\n", k.what)
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

// leaseBeyondGrace returns nil once more than grace of the lease is left,
// heartbeating at once if it is not yet: a grant's lease_ms (the part of
// its group nearer its deadline than the heartbeats' lease) can bring the
// deadline within the grace, and a heartbeat sent after the grant renews
// that part. Else CMD would be stopped as soon as it started: the error
// says how much is left and why.
func leaseBeyondGrace(ctx context.Context, s *apiclient.Session, grace time.Duration) error {
	if s.LeaseLeft() > grace {
		return nil
	}
	err := s.KeepAlive(ctx) // bounded as a heartbeat is: half the lease at most
	left := s.LeaseLeft()
	switch {
	case left > grace:
		return nil
	case err != nil:
		return fmt.Errorf("%v of the lease is left, within --grace %v, and a heartbeat to renew it failed: %w", left.Round(time.Millisecond), grace, err)
	}
	return fmt.Errorf("%v of the lease is left after a heartbeat renewed it, within --grace %v", left.Round(time.Millisecond), grace)
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

// waiting tells the user, on stderr, where in the queue the command waits
// (what: "for NAME", "to lead NAME").
func waiting(what string) fencelock.AcquireOption {
	return fencelock.WithQueuePosition(func(n int) {
		fmt.Fprintf(os.Stderr, "fencelock: waiting %s (position %d)\n", what, n)
	})
}

// relay passes on each update of a grant's lock or election (c.Watch's,
// c.Observe's) as what it shows of the grant, until in closes or ctx ends.
func relay[T any](ctx context.Context, in <-chan T, show func(T) shown) <-chan shown {
	out := make(chan shown)
	go func() {
		defer close(out)
		for v := range in {
			select {
			case out <- show(v):
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// grantEnv is CMD's environment for grant g: its token and fence, and name
// (FENCELOCK_LOCK=… or FENCELOCK_ELECTION=…).
func grantEnv(g heldGrant, name string) []string {
	return []string{"FENCELOCK_TOKEN=" + strconv.FormatUint(g.Token(), 10), "FENCELOCK_FENCE=" + g.Fence().String(), name}
}

func lockCmd(args []string) error {
	var f holdFlags
	ops, cmd, err := f.parse("lock", "[flags] NAME [--] CMD [ARGS...]", 1, args)
	if err != nil {
		return err
	}
	name := ops[0]
	return hold(&f, grantKind{
		what: "lock " + name,
		take: func(ctx context.Context, s *apiclient.Session) (heldGrant, error) {
			l, err := s.Acquire(ctx, name, waiting("for "+name))
			if err != nil {
				return nil, fmt.Errorf("acquire %s: %w", name, err)
			}
			return l, nil
		},
		watch: func(ctx context.Context, c *apiclient.Client, sid, token uint64) <-chan shown {
			return relay(ctx, c.Watch(ctx, name), func(li fencelock.LockInfo) shown {
				return shown{held: li.Held && shownAs(li.SessionID, sid) && li.Token == token, err: li.Err}
			})
		},
		env: func(g heldGrant) []string { return grantEnv(g, "FENCELOCK_LOCK="+name) },
	}, cmd)
}

func electCmd(args []string) error {
	var f holdFlags
	ops, cmd, err := f.parse("elect", "[flags] NAME VALUE [--] CMD [ARGS...]", 2, args)
	if err != nil {
		return err
	}
	name, value := ops[0], ops[1]
	return hold(&f, grantKind{
		what: "leadership of " + name,
		take: func(ctx context.Context, s *apiclient.Session) (heldGrant, error) {
			l, err := s.Campaign(ctx, name, value, waiting("to lead "+name))
			if err != nil {
				return nil, fmt.Errorf("campaign %s: %w", name, err)
			}
			return l, nil
		},
		watch: func(ctx context.Context, c *apiclient.Client, sid, token uint64) <-chan shown {
			return relay(ctx, c.Observe(ctx, name), func(li fencelock.LeaderInfo) shown {
				return shown{held: shownAs(li.SessionID, sid) && li.Token == token, err: li.Err}
			})
		},
		env: func(g heldGrant) []string { return grantEnv(g, "FENCELOCK_ELECTION="+name) },
	}, cmd)
}
