package lockbench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// W12: a rolling restart of the service under its clients. The service runs
// as replicas its clients reach over the network only (fencelock serve
// processes; etcd members), so a session must outlive the replica it was
// made on.

// Service is a lock service whose clients are not replicas (W12).
type Service interface {
	// Replicas is the number of replicas, indexed from 0.
	Replicas() int
	// Leader returns the index of the (default group's) consensus leader
	// once the running replicas agree on one.
	Leader(ctx context.Context) (int, error)
	// Open opens one session with the given TTL through a client that
	// knows every replica's endpoint.
	Open(ctx context.Context, ttl time.Duration) (ServiceSession, error)
	// Terminate stops replica i as a deploy does (SIGTERM, or what the
	// system does on it) and returns once it has stopped.
	Terminate(ctx context.Context, i int) error
	// Kill stops replica i at once (SIGKILL) and returns once it is gone.
	Kill(ctx context.Context, i int) error
	// Restart starts replica i again on its data and returns once it is
	// ready (fencelock: /readyz answers 200).
	Restart(ctx context.Context, i int) error
	// Close stops everything still running.
	Close() error
}

// ServiceSession is one client session of a Service.
type ServiceSession interface {
	// Acquire waits until the lock is granted.
	Acquire(ctx context.Context, name string) (ServiceGrant, error)
	// TryAcquire takes the lock if it is free, or fails with an error
	// wrapping ErrHeld if it is held.
	TryAcquire(ctx context.Context, name string) (ServiceGrant, error)
	// Done is closed when the session is over for its holder.
	Done() <-chan struct{}
	// Err says why, once Done is closed.
	Err() error
	// Close ends the session, releasing its locks.
	Close(ctx context.Context) error
}

// ServiceGrant is one grant of a lock to a ServiceSession.
type ServiceGrant interface {
	Token() uint64
	// Done is closed when the holder must stop acting on the lock.
	Done() <-chan struct{}
	Release(ctx context.Context) error
}

// ErrHeld is what a TryAcquire of a held lock fails with.
var ErrHeld = errors.New("lockbench: the lock is held")

// External is a lock holder in a process of its own (the fencelock lock
// command running a long command, a Python client).
type External interface {
	// Token is the fencing token the holder was granted.
	Token() uint64
	// Exited is closed when its process has ended.
	Exited() <-chan struct{}
	// Finish asks the holder to end normally (release and exit) and
	// waits for it. It returns false with what happened when the process
	// had already ended (its command killed, its lock lost) or did not
	// end well.
	Finish(ctx context.Context) (ok bool, detail string)
}

// Externals is a Service that can also start holders in processes of
// their own. Kinds names them, e.g. "cli" and "python"; Start returns
// once the holder reports its grant of name.
type Externals interface {
	Kinds() []string
	Start(ctx context.Context, kind, name string, ttl time.Duration) (External, error)
}

// Fencer admits a write to resource with token unless a higher token was
// admitted there before (fencelock.Fencer's rule).
type Fencer interface {
	Admit(resource string, token uint64) error
}

// memFencer is Fencer's rule in memory, for a system without one.
type memFencer struct {
	mu   sync.Mutex
	high map[string]uint64
}

func (f *memFencer) Admit(resource string, token uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h := f.high[resource]; token < h {
		return fmt.Errorf("stale token %d on %s after %d", token, resource, h)
	}
	f.high[resource] = token
	return nil
}

// NewMemFencer returns an in-memory Fencer with fencelock.Fencer's rule.
func NewMemFencer() Fencer { return &memFencer{high: map[string]uint64{}} }

// W12Options shape a W12 run; zero values take the specified figures.
type W12Options struct {
	Clients int           // sessions cycling acquire/release and holding a lock each; 16
	Rounds  int           // graceful rolling restarts; 2
	NoKill  bool          // skip the final SIGKILL and restart
	TTL     time.Duration // the sessions' TTL; 10s
	// Settle is how many cycles every client completes after a replica is
	// ready, before the next step; 3.
	Settle int
	// Down is how long a stopped replica stays down before its restart
	// (a deploy's new process starting); 2s. Dwell is the least time the
	// clients run after a replica is ready, before the next step, so that
	// every session heartbeats through the others in it; TTL/2.
	Down, Dwell time.Duration
	Fencer      Fencer // nil: NewMemFencer()
	// Log, if set, gets a line per step and per loss as it happens.
	Log func(format string, args ...any)
}

func (o W12Options) defaults() W12Options {
	if o.Clients <= 0 {
		o.Clients = 16
	}
	if o.Rounds <= 0 {
		o.Rounds = 2
	}
	if o.TTL <= 0 {
		o.TTL = 10 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = 3
	}
	if o.Down <= 0 {
		o.Down = 2 * time.Second
	}
	if o.Dwell <= 0 {
		o.Dwell = o.TTL / 2
	}
	if o.Fencer == nil {
		o.Fencer = NewMemFencer()
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	return o
}

// w12call bounds one acquire or release: a call still waiting after it
// counts as failed.
const w12call = 30 * time.Second

// w12run is the state of one W12 run shared by its goroutines.
type w12run struct {
	o     W12Options
	start time.Time

	mu       sync.Mutex
	step     string         // the step now running, for the events
	holding  map[string]int // lock name → holders the bench sees now
	events   []string       // losses and doubles, in order
	durs     samples        // every acquire and release that returned OK
	longest  time.Duration
	longAt   string
	failed   int
	failures []string
	cycles   atomic.Int64

	sessionsLost, stale int
	lost                map[string]bool // long-held locks lost: their holder told, or a probe got them
	doubled             map[string]bool // locks seen with two holders, or a stale write refused by the fencer
}

// markLost records name as lost and says whether it was news.
func (r *w12run) markLost(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lost[name] {
		return false
	}
	r.lost[name] = true
	return true
}

func (r *w12run) isLost(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost[name]
}

func (r *w12run) at() string {
	return fmt.Sprintf("t=%.1fs %s", time.Since(r.start).Seconds(), r.step)
}

func (r *w12run) event(format string, args ...any) {
	r.mu.Lock()
	s := r.at() + ": " + fmt.Sprintf(format, args...)
	r.events = append(r.events, s)
	r.mu.Unlock()
	r.o.Log("W12 %s", s)
}

// enter and leave bracket a holder's section: a second holder of one lock
// at once is a double holder.
func (r *w12run) enter(name, who string) {
	r.mu.Lock()
	r.holding[name]++
	n := r.holding[name]
	if n > 1 {
		r.doubled[name] = true
	}
	r.mu.Unlock()
	if n > 1 {
		r.event("DOUBLE HOLDER: %s holds %s with %d other holder(s)", who, name, n-1)
	}
}

func (r *w12run) leave(name string) {
	r.mu.Lock()
	r.holding[name]--
	r.mu.Unlock()
}

// admit writes token to the fencer: a refused write means a holder acted
// after a later grant, a double holder.
func (r *w12run) admit(name string, token uint64, who string) {
	if err := r.o.Fencer.Admit(name, token); err != nil {
		r.mu.Lock()
		r.stale++
		r.doubled[name] = true
		r.mu.Unlock()
		r.event("DOUBLE HOLDER (fencer): %s wrote %s with token %d: %v", who, name, token, err)
	}
}

// now returns the step running now, to label a call by when it started.
func (r *w12run) now() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.step
}

// took records a call that started in step and took d: a failed call
// counts as failed, and its wait as a stall like any other call's. A call
// is labelled by the step it started in, and the one it ended in if not
// the same ("start..end").
func (r *w12run) took(d time.Duration, what, step string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.step != step {
		step += ".." + r.step
	}
	if d > r.longest {
		r.longest, r.longAt = d, fmt.Sprintf("%s(%s)", strings.ReplaceAll(step, " ", "_"), what)
		if err != nil {
			r.longAt += "(failed)"
		}
	}
	if err != nil {
		r.failed++
		if len(r.failures) < 20 {
			r.failures = append(r.failures, fmt.Sprintf("t=%.1fs %s: %s after %v: %v",
				time.Since(r.start).Seconds()-d.Seconds(), step, what, d.Round(time.Millisecond), err))
		}
		return
	}
	r.durs = append(r.durs, d)
}

// w12holder is one client: a session, its long-held lock, and its cycle
// lock.
type w12holder struct {
	i       int
	mu      sync.Mutex
	s       ServiceSession
	held    ServiceGrant // nil once lost
	heldTok uint64
}

func (h *w12holder) heldName() string  { return fmt.Sprintf("bench/W12/held/%d", h.i) }
func (h *w12holder) cycleName() string { return fmt.Sprintf("bench/W12/cycle/%d", h.i) }

// W12 runs the rolling restart of a Service under its clients: o.Clients
// sessions each cycle acquire/release on a lock of its own and hold one
// lock throughout; the Service's Externals (if any) hold a lock each in
// processes of their own. Then, o.Rounds times, every replica, leader
// first, is terminated, restarted and ready, and the clients complete
// o.Settle cycles each; then (unless o.NoKill) the leader is killed and
// restarted. After every step a probe session tries to take every held
// lock: a grant is a lock lost.
func W12(ctx context.Context, svc Service, system string, o W12Options) (res Result, err error) {
	o = o.defaults()
	r := &w12run{o: o, start: time.Now(), step: "setup", holding: map[string]int{},
		lost: map[string]bool{}, doubled: map[string]bool{}}
	res = Result{System: system, Workload: "W12", Workers: o.Clients}
	if _, err := svc.Leader(ctx); err != nil {
		return res, err
	}
	hs := make([]*w12holder, o.Clients)
	for i := range hs {
		h := &w12holder{i: i}
		if h.s, err = svc.Open(ctx, o.TTL); err != nil {
			return res, fmt.Errorf("open session %d: %w", i, err)
		}
		g, err := h.s.Acquire(ctx, h.heldName())
		if err != nil {
			return res, fmt.Errorf("session %d: acquire its held lock: %w", i, err)
		}
		h.held, h.heldTok = g, g.Token()
		r.enter(h.heldName(), fmt.Sprintf("client %d", i))
		r.admit(h.heldName(), h.heldTok, fmt.Sprintf("client %d", i))
		hs[i] = h
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, h := range hs {
			if h != nil {
				h.mu.Lock()
				_ = h.s.Close(cctx)
				h.mu.Unlock()
			}
		}
	}()
	type ext struct {
		kind, name string
		e          External
	}
	var exts []ext
	if x, ok := svc.(Externals); ok {
		for _, k := range x.Kinds() {
			name := "bench/W12/" + k
			e, err := x.Start(ctx, k, name, o.TTL)
			if err != nil {
				return res, fmt.Errorf("start the %s holder: %w", k, err)
			}
			r.enter(name, k)
			r.admit(name, e.Token(), k)
			exts = append(exts, ext{k, name, e})
		}
	}
	defer func() {
		for _, x := range exts {
			fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			x.e.Finish(fctx) // a no-op once finished
			cancel()
		}
	}()
	probe, err := svc.Open(ctx, o.TTL)
	if err != nil {
		return res, fmt.Errorf("open the probe session: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = probe.Close(cctx)
	}()

	// Watch each client's session and long-held lock: their end is a loss.
	watchCtx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopWatch(); wg.Wait() }()
	for _, h := range hs {
		h.mu.Lock()
		s, g := h.s, h.held
		h.mu.Unlock()
		wg.Go(func() {
			select {
			case <-watchCtx.Done():
				return
			case <-g.Done():
			}
			select {
			case <-watchCtx.Done():
				return
			default:
			}
			r.markLost(h.heldName())
			r.leave(h.heldName())
			h.mu.Lock()
			h.held = nil
			h.mu.Unlock()
			r.event("LONG-HELD LOCK LOST: client %d's %s (token %d), session err: %v", h.i, h.heldName(), h.heldTok, s.Err())
		})
	}
	extLost := map[string]bool{}
	var extMu sync.Mutex
	for _, x := range exts {
		wg.Go(func() {
			select {
			case <-watchCtx.Done():
				return
			case <-x.e.Exited():
			}
			select {
			case <-watchCtx.Done():
				return
			default:
			}
			extMu.Lock()
			extLost[x.kind] = true
			extMu.Unlock()
			r.leave(x.name)
			r.event("EXTERNAL HOLDER ENDED: the %s holder of %s exited before the end", x.kind, x.name)
		})
	}

	// The cycling clients.
	cycling, stopCycling := context.WithCancel(ctx)
	counts := make([]atomic.Int64, len(hs))
	var cyclers sync.WaitGroup
	for k, h := range hs {
		cyclers.Go(func() { r.cycle(cycling, svc, h, &counts[k]) })
	}
	stopped := false
	stopAll := func() {
		if !stopped {
			stopped = true
			stopCycling()
			cyclers.Wait()
		}
	}
	defer stopAll()

	settle := func() {
		dwell := time.After(o.Dwell)
		defer func() {
			select {
			case <-dwell:
			case <-ctx.Done():
			}
		}()
		base := make([]int64, len(counts))
		for k := range counts {
			base[k] = counts[k].Load()
		}
		deadline := time.Now().Add(2 * w12call)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			ok := true
			for k := range counts {
				ok = ok && counts[k].Load() >= base[k]+int64(o.Settle)
			}
			if ok {
				return
			}
			time.Sleep(10 * time.Millisecond) // polling counters the clients feed
		}
		r.event("clients did not all complete %d cycles within %v", o.Settle, 2*w12call)
	}
	// check probes every long-held lock and writes every holder's token
	// to the fencer again.
	check := func() {
		for _, h := range hs {
			h.mu.Lock()
			g := h.held
			h.mu.Unlock()
			if g != nil {
				r.admit(h.heldName(), h.heldTok, fmt.Sprintf("client %d", h.i))
			}
			var told <-chan struct{}
			if g != nil {
				told = g.Done()
			}
			r.probe(ctx, probe, h.heldName(), told)
		}
		for _, x := range exts {
			extMu.Lock()
			lost := extLost[x.kind]
			extMu.Unlock()
			if !lost {
				r.admit(x.name, x.e.Token(), x.kind)
			}
			r.probe(ctx, probe, x.name, x.e.Exited())
		}
	}

	settle() // the clients run with every replica up first
	check()
	type stepTime struct {
		name              string
		stopMS, restartMS float64
	}
	var steps []stepTime
	do := func(round string, kill bool) error {
		leader, err := svc.Leader(ctx)
		if err != nil {
			return err
		}
		order := []int{leader}
		if kill {
			order = order[:1]
		} else {
			for i := range svc.Replicas() {
				if i != leader {
					order = append(order, i)
				}
			}
		}
		for _, i := range order {
			how, stop := "SIGTERM", svc.Terminate
			if kill {
				how, stop = "SIGKILL", svc.Kill
			}
			cur, _ := svc.Leader(ctx)
			name := fmt.Sprintf("%s r%d%s %s", round, i, map[bool]string{true: "(leader)", false: ""}[cur == i], how)
			r.mu.Lock()
			r.step = name
			r.mu.Unlock()
			o.Log("W12 t=%.1fs %s", time.Since(r.start).Seconds(), name)
			t0 := time.Now()
			if err := stop(ctx, i); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			t1 := time.Now()
			select {
			case <-time.After(o.Down):
			case <-ctx.Done():
				return ctx.Err()
			}
			r.mu.Lock()
			r.step = name + " restarting"
			r.mu.Unlock()
			t1a := time.Now()
			if err := svc.Restart(ctx, i); err != nil {
				return fmt.Errorf("%s: restart: %w", name, err)
			}
			t2 := time.Now()
			r.mu.Lock()
			r.step = name + " ready"
			r.mu.Unlock()
			steps = append(steps, stepTime{name, ms(t1.Sub(t0)), ms(t2.Sub(t1a))})
			settle()
			check()
		}
		return nil
	}
	for k := range o.Rounds {
		if err := do(fmt.Sprintf("round%d", k+1), false); err != nil {
			return res, err
		}
	}
	if !o.NoKill {
		if err := do("kill", true); err != nil {
			return res, err
		}
	}
	r.mu.Lock()
	r.step = "end"
	r.mu.Unlock()
	stopAll()
	check()
	stopWatch()
	wg.Wait()

	// The long-held locks, released: the fencer sees their last writes.
	ended := 0
	var extNotes []string
	for _, x := range exts {
		ok, detail := x.e.Finish(ctx)
		extMu.Lock()
		lost := extLost[x.kind] || r.isLost(x.name)
		extMu.Unlock()
		if !ok || lost {
			ended++
			r.event("the %s holder did not hold to the end: %s", x.kind, detail)
		}
		extNotes = append(extNotes, fmt.Sprintf("%s=%d", externalKey(x.kind), b2i(!ok || lost)))
	}
	for _, h := range hs {
		h.mu.Lock()
		g := h.held
		h.mu.Unlock()
		if g == nil {
			continue
		}
		r.admit(h.heldName(), h.heldTok, fmt.Sprintf("client %d", h.i))
		r.leave(h.heldName())
		rctx, cancel := context.WithTimeout(ctx, w12call)
		t0, step := time.Now(), r.now()
		err := g.Release(rctx)
		cancel()
		r.took(time.Since(t0), "release held", step, err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	heldLost := 0
	for _, h := range hs {
		heldLost += b2i(r.lost[h.heldName()])
	}
	a := r.durs.sorted()
	res.Ops = int(r.cycles.Load())
	res.DurationS = round1(time.Since(r.start).Seconds())
	if res.DurationS > 0 {
		res.OpsPerS = round1(float64(res.Ops) / res.DurationS)
	}
	res.P50, res.P99, res.P999, res.Max = a.pct(.5), a.pct(.99), a.pct(.999), a.pct(1)
	res.Errors = r.failed
	res.addNote("sessions_lost=%d held_lost=%d double_holders=%d stale_writes=%d failed_calls=%d longest_stall_ms=%v longest_at=%s",
		r.sessionsLost, heldLost, len(r.doubled), r.stale, r.failed, ms(r.longest), r.longAt)
	if len(extNotes) > 0 {
		res.addNote("%s externals_ended_early=%d", strings.Join(extNotes, " "), ended)
	} else {
		res.addNote("externals=none")
	}
	res.addNote("clients=%d rounds=%d kill=%v ttl_s=%v down_s=%v dwell_s=%v", o.Clients, o.Rounds, !o.NoKill, o.TTL.Seconds(), o.Down.Seconds(), o.Dwell.Seconds())
	for _, s := range steps {
		res.addNote("[%s: stop_ms=%v restart_ms=%v]", strings.ReplaceAll(s.name, " ", "_"), s.stopMS, s.restartMS)
	}
	for _, e := range r.events {
		res.addNote("{event: %s}", e)
	}
	for _, f := range r.failures {
		res.addNote("{failed: %s}", f)
	}
	return res, nil
}

// probe tries to take name on the probe session: a grant is a lost lock,
// and a double holder unless its holder had been told it lost it (told
// closed; nil: no holder is known). A lock known lost is not probed again.
func (r *w12run) probe(ctx context.Context, probe ServiceSession, name string, told <-chan struct{}) {
	if r.isLost(name) {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, w12call)
	defer cancel()
	got, err := probe.TryAcquire(pctx, name)
	if err != nil {
		if !errors.Is(err, ErrHeld) {
			r.event("probe of %s failed: %v", name, err)
		}
		return
	}
	wasTold := told == nil
	if told != nil {
		select {
		case <-told:
			wasTold = true
		default:
		}
	}
	r.markLost(name)
	r.admit(name, got.Token(), "the probe")
	if !wasTold {
		r.mu.Lock()
		r.doubled[name] = true
		r.mu.Unlock()
	}
	r.event("PROBE GOT %s (token %d): a held lock was free; its holder had been told it lost it: %v", name, got.Token(), wasTold)
	_ = got.Release(pctx)
}

// cycle is one client's loop: acquire its cycle lock, write its token to
// the fencer before and after a short section, release. A session that
// ends is a session lost; the client opens another and goes on.
func (r *w12run) cycle(ctx context.Context, svc Service, h *w12holder, count *atomic.Int64) {
	who := fmt.Sprintf("client %d", h.i)
	for ctx.Err() == nil {
		h.mu.Lock()
		s := h.s
		h.mu.Unlock()
		select {
		case <-s.Done():
			r.mu.Lock()
			r.sessionsLost++
			r.mu.Unlock()
			r.event("SESSION LOST: %s's session: %v", who, s.Err())
			ns, err := svc.Open(ctx, r.o.TTL)
			if err != nil {
				r.took(0, "reopen session", r.now(), err)
				time.Sleep(100 * time.Millisecond) // before trying again
				continue
			}
			h.mu.Lock()
			h.s = ns
			h.mu.Unlock()
			continue
		default:
		}
		name := h.cycleName()
		actx, cancel := context.WithTimeout(ctx, w12call)
		t0, step := time.Now(), r.now()
		g, err := s.Acquire(actx, name)
		if ctx.Err() != nil {
			cancel()
			if err == nil {
				rctx, c2 := context.WithTimeout(context.Background(), w12call)
				_ = g.Release(rctx)
				c2()
			}
			return
		}
		r.took(time.Since(t0), "acquire", step, err)
		if err != nil {
			cancel()
			continue
		}
		r.enter(name, who)
		r.admit(name, g.Token(), who)
		time.Sleep(time.Millisecond) // the section
		r.admit(name, g.Token(), who)
		r.leave(name)
		cancel()
		// Not under ctx: the end of the run must not fail a release.
		rctx, c2 := context.WithTimeout(context.Background(), w12call)
		t1, step := time.Now(), r.now()
		err = g.Release(rctx)
		r.took(time.Since(t1), "release", step, err)
		c2()
		if err == nil {
			r.cycles.Add(1)
			count.Add(1)
		}
	}
}

// externalKey is the note that counts a kind of external holder's early
// end: the fencelock lock command's command killed, a Python client's lock
// lost.
func externalKey(kind string) string {
	switch kind {
	case "cli":
		return "commands_killed"
	case "python":
		return "python_lost"
	}
	return kind + "_ended_early"
}

// w12Headline are the figures W12 compares.
var w12Headline = []string{"sessions_lost", "held_lost", "commands_killed", "python_lost", "double_holders", "failed_calls", "longest_stall_ms"}
