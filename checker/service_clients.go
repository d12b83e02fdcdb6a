package checker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	lockclient "github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/httpapi"
)

// svcGo is a client of the service through the Go client: one process
// with one session at a time, behind client.New's failover over the three
// endpoints in its own order.
type svcGo struct {
	id  int
	r   *svcRun
	c   *lockclient.Client
	rng *rand.Rand
	s   *lockclient.Session

	closing  atomic.Bool    // the run closes its client: its sessions end, not lost
	watchers sync.WaitGroup // of its sessions and grants
}

// ensureSession opens a session when the client has none that works. A
// session whose Done closes while the client is not closing was lost.
func (g *svcGo) ensureSession(ctx context.Context) bool {
	if g.s != nil && g.s.Err() == nil {
		return true
	}
	sctx, cancel := context.WithTimeout(ctx, svcOpTimeout)
	s, err := g.c.NewSession(sctx, fencelock.WithTTL(svcTTL))
	cancel()
	if err != nil {
		wait(ctx, 50*time.Millisecond)
		return false
	}
	g.s = s
	// The last heartbeats' outcomes, for the reader of a loss.
	var beatsMu sync.Mutex
	var beats []string
	s.OnHeartbeat(func(err error, left time.Duration) {
		beatsMu.Lock()
		defer beatsMu.Unlock()
		beats = append(beats, fmt.Sprintf("%s: err=%v left=%v", time.Now().Format("15:04:05.000"), err, left.Round(time.Millisecond)))
		if len(beats) > 4 {
			beats = beats[1:]
		}
	})
	g.watchers.Add(1)
	go func() {
		defer g.watchers.Done()
		<-s.Done()
		if !g.closing.Load() {
			beatsMu.Lock()
			last := strings.Join(beats, "; ")
			beatsMu.Unlock()
			g.r.violation("session lost: client %d's session %d ended at %s while its client kept calling: %v (its last heartbeats: %s)",
				g.id, s.ID(), time.Now().Format("15:04:05.000"), s.Err(), last)
		}
	}()
	return true
}

func (g *svcGo) run(ctx context.Context) {
	for ctx.Err() == nil {
		if !g.ensureSession(ctx) {
			continue
		}
		s := g.s
		// One Go client contends with the split client; the others leave
		// it its lock, so that it holds it often enough for the faults.
		locks := svcLocks[1:]
		if g.id == 0 {
			locks = svcLocks
		}
		name := locks[g.rng.IntN(len(locks))]
		kind := OpAcquire
		if g.rng.IntN(4) == 0 {
			kind = OpTryAcquire
		}
		i := g.r.h.begin(Op{Client: g.id, Kind: kind, Lock: name, Session: s.ID()})
		actx, cancel := context.WithTimeout(ctx, svcOpTimeout)
		var l *lockclient.Lock
		var err error
		if kind == OpTryAcquire {
			l, err = s.TryAcquire(actx, name)
		} else {
			l, err = s.Acquire(actx, name)
		}
		cancel()
		switch {
		case err == nil:
			g.r.h.end(i, Granted, l.Token())
		case errors.Is(err, fencelock.ErrLocked):
			g.r.h.end(i, Locked, 0)
			wait(ctx, time.Duration(1+g.rng.IntN(10))*time.Millisecond)
			continue
		default:
			g.r.h.end(i, Unknown, 0)
			wait(ctx, 20*time.Millisecond)
			continue
		}
		if closed(l.Done()) {
			continue // over before it could act: the group frees it
		}
		b := &svcBelief{client: g.id, session: s.ID(), name: name, token: l.Token(), open: func() bool { return !closed(l.Done()) }}
		g.r.hold(b)
		released := make(chan struct{})
		g.watchers.Add(1)
		go func() {
			defer g.watchers.Done()
			select {
			case <-l.Done():
				g.r.stop(b, time.Now(), true)
			case <-released:
			}
		}()
		g.critical(ctx, b, l, released)
	}
}

// critical makes three fenced writes, checking Done before each, then
// releases; stopping (ctx), it keeps the grant for the end to close.
func (g *svcGo) critical(ctx context.Context, b *svcBelief, l *lockclient.Lock, released chan struct{}) {
	for range 3 {
		if ctx.Err() != nil || closed(l.Done()) {
			return
		}
		g.r.write(b)
		wait(ctx, 2*time.Millisecond)
	}
	if ctx.Err() != nil || closed(l.Done()) {
		return
	}
	g.r.stop(b, time.Now(), false)
	close(released)
	i := g.r.h.begin(Op{Client: g.id, Kind: OpRelease, Lock: b.name, Session: b.session, Token: b.token})
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), svcOpTimeout)
	err := l.Release(rctx)
	cancel()
	if err == nil {
		g.r.h.end(i, OK, 0)
		return
	}
	// ErrNotHeld may be the client's own look at a grant whose lease ran
	// out, which the group may still hold: the model is not told either way.
	g.r.h.end(i, Unknown, 0)
}

// svcHeldHeader marks an answer to a call a frozen replica held;
// svcBeganHeader says when the replica's handler began (Unix nanoseconds),
// the earliest one if a forward added the owner's.
const svcHeldHeader, svcBeganHeader = "Checker-Held", "Checker-Began"

// svcSplit is the split client: a raw-HTTP process with one session that
// sends each heartbeat and each acquire to two replicas at once (docs/http.md
// allows it: an acquire re-issued for a lock the session holds answers that
// grant), acting on whichever grants first and on any later grant.
type svcSplit struct {
	id      int
	r       *svcRun
	eps     []string
	rng     *rand.Rand // the acquire loop's
	beatRng *rand.Rand
	hc      *http.Client
	tr      *http.Transport
	late    sync.WaitGroup // answers still out

	// cut: the client is cut off from every replica; its calls never
	// arrive (cutOff).
	cut atomic.Bool

	mu          sync.Mutex
	sess        splitSession
	excused     bool      // cut off since the session's last answer: its loss is no violation
	deadline    time.Time // the last answered heartbeat's send + lease_ms
	lost        bool
	holding     []*svcBelief // grants answered and not released
	pending     []*svcBelief // answered late: to act on and release
	granted     map[uint64]bool
	released    map[uint64]bool // tokens it released or gave up
	grants      int
	heldAnswers int
}

func newSplit(id int, r *svcRun, eps []string, rng *rand.Rand) *svcSplit {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &svcSplit{id: id, r: r, eps: eps, rng: rng, beatRng: rand.New(rand.NewPCG(rng.Uint64(), 2)),
		hc: &http.Client{Transport: tr}, tr: tr, granted: map[uint64]bool{}, released: map[uint64]bool{}}
}

// splitSession is the split client's session, as its create answered.
type splitSession struct {
	id     uint64
	secret string
	lease  time.Duration
}

func (s *svcSplit) cur() splitSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess
}

// cutOff cuts the client off from every replica (cut false: heals it).
func (s *svcSplit) cutOff(cut bool) {
	s.mu.Lock()
	if cut {
		s.excused = true
	}
	s.mu.Unlock()
	s.cut.Store(cut)
}

var errSplitCut = errors.New("checker: the split client is cut off")

func (s *svcSplit) counts() (grants, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grants, s.heldAnswers
}

// do makes one call to base and decodes a 2xx answer into out; held
// reports whether a frozen replica held the call.
func (s *svcSplit) do(ctx context.Context, sess splitSession, method, base, path string, body, out any) (status int, held bool, err error) {
	status, held, _, err = s.doBegan(ctx, sess, method, base, path, body, out)
	return status, held, err
}

// doBegan is do that also returns when the answering handler began (zero
// if no header says).
func (s *svcSplit) doBegan(ctx context.Context, sess splitSession, method, base, path string, body, out any) (status int, held bool, began time.Time, err error) {
	if s.cut.Load() {
		return 0, false, began, errSplitCut
	}
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return 0, false, began, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, false, began, err
	}
	if sess.secret != "" {
		req.Header.Set(httpapi.SecretHeader, sess.secret)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, false, began, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	held = resp.Header.Get(svcHeldHeader) != ""
	for _, v := range resp.Header.Values(svcBeganHeader) {
		if ns, perr := strconv.ParseInt(v, 10, 64); perr == nil && (began.IsZero() || time.Unix(0, ns).Before(began)) {
			began = time.Unix(0, ns)
		}
	}
	if err != nil {
		return resp.StatusCode, held, began, err
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, held, began, err
		}
	}
	return resp.StatusCode, held, began, nil
}

func splitLockPath(verb string) string {
	return "/v1/locks/" + url.PathEscape(svcLocks[0]) + "/" + verb
}

func (sess splitSession) path() string { return "/v1/sessions/" + httpapiID(sess.id) }

func httpapiID(id uint64) string {
	j, _ := json.Marshal(httpapi.ID(id))
	return string(j[1 : len(j)-1])
}

// create opens a session for the split client on the first endpoint that
// answers.
func (s *svcSplit) create(ctx context.Context) error {
	var errs error
	for _, ep := range s.eps {
		var out struct {
			ID      httpapi.ID `json:"session_id"`
			Secret  string     `json:"session_secret"`
			LeaseMS int64      `json:"lease_ms"`
		}
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, svcOpTimeout)
		status, _, err := s.do(cctx, splitSession{}, "POST", ep, "/v1/sessions", map[string]any{"ttl_ms": svcTTL.Milliseconds(), "name": "split"}, &out)
		cancel()
		if err == nil && status == http.StatusCreated {
			s.mu.Lock()
			s.sess = splitSession{uint64(out.ID), out.Secret, time.Duration(out.LeaseMS) * time.Millisecond}
			s.deadline, s.lost, s.excused = sent.Add(s.sess.lease), false, false
			s.mu.Unlock()
			return nil
		}
		errs = errors.Join(errs, err)
	}
	return errors.Join(errors.New("the split client's session: no replica created it"), errs)
}

// two returns two distinct endpoints, drawn by rng.
func (s *svcSplit) two(rng *rand.Rand) [2]string {
	i := rng.IntN(len(s.eps))
	j := (i + 1 + rng.IntN(len(s.eps)-1)) % len(s.eps)
	return [2]string{s.eps[i], s.eps[j]}
}

// beat heartbeats the session to two replicas at once, every quarter of
// its lease; a lease with no answered heartbeat, or a 404, is a session
// lost while its client kept calling.
func (s *svcSplit) beat(ctx context.Context) {
	t := time.NewTicker(s.cur().lease / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.cut.Load() {
			continue // nothing it sends arrives
		}
		sess := s.cur()
		var wg sync.WaitGroup
		for _, ep := range s.two(s.beatRng) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out struct {
					LeaseMS int64 `json:"lease_ms"`
				}
				sent := time.Now()
				bctx, cancel := context.WithTimeout(ctx, svcRawBeat)
				status, _, err := s.do(bctx, sess, "POST", ep, sess.path()+"/heartbeat", nil, &out)
				cancel()
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.sess != sess {
					return // a new session's already
				}
				switch {
				case err == nil && status == http.StatusOK:
					if d := sent.Add(time.Duration(out.LeaseMS) * time.Millisecond); d.After(s.deadline) {
						s.deadline = d
					}
				case err == nil && status == http.StatusNotFound && !s.lost && !s.excused && ctx.Err() == nil:
					s.lost = true
					s.r.violation("session lost: the split client's session %d was answered 404 by %s while its client kept calling", sess.id, ep)
				}
			}()
		}
		wg.Wait()
		s.mu.Lock()
		if !s.lost && !s.excused && s.sess == sess && ctx.Err() == nil && time.Now().After(s.deadline) {
			s.lost = true
			s.r.violation("session lost: the split client's session %d had no heartbeat answered within its lease (%v) while its client kept calling", sess.id, sess.lease)
		}
		s.mu.Unlock()
	}
}

// splitAnswer is one answer to an acquire of the split client.
type splitAnswer struct {
	sess    splitSession
	op      int
	ep      string
	sent    time.Time
	outcome Outcome
	token   uint64
	lease   time.Duration
	held    bool
	began   time.Time // when the answering handler began
}

func (s *svcSplit) acquire(ctx context.Context, ep string) splitAnswer {
	a := splitAnswer{sess: s.cur(), ep: ep, outcome: Unknown}
	a.op = s.r.h.begin(Op{Client: s.id, Kind: OpTryAcquire, Lock: svcLocks[0], Session: a.sess.id})
	a.sent = time.Now()
	var out struct {
		Granted bool       `json:"granted"`
		Token   httpapi.ID `json:"fencing_token"`
		LeaseMS int64      `json:"lease_ms"`
	}
	cctx, cancel := context.WithTimeout(ctx, svcRawCall)
	status, held, began, err := s.doBegan(cctx, a.sess, "POST", ep, splitLockPath("acquire"), map[string]any{"session_id": httpapiID(a.sess.id), "wait": false}, &out)
	cancel()
	a.held, a.began = held, began
	if err == nil && status == http.StatusOK {
		a.outcome = Locked
		if out.Granted {
			a.outcome, a.token, a.lease = Granted, uint64(out.Token), time.Duration(out.LeaseMS)*time.Millisecond
		}
	}
	return a
}

// answer records a and returns the grant to act on if it makes a new one.
// An answer naming a token other than the one the session holds the lock
// with, while it holds it, is two tokens for one grant.
func (s *svcSplit) answer(a splitAnswer) *svcBelief {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.held {
		s.heldAnswers++
	}
	if a.outcome != Granted {
		s.r.h.end(a.op, a.outcome, 0)
		return nil
	}
	if f, stale := s.r.freedBefore(svcLocks[0], a.token, a.began); stale {
		s.r.violation("stale grant answered: session %d's acquire of %q (sent %v ago to %s, held=%v) answered granted token %d, whose end the group applied %v before the handler began",
			a.sess.id, svcLocks[0], time.Since(a.sent).Round(time.Millisecond), a.ep, a.held, a.token, a.began.Sub(f).Round(time.Millisecond))
	}
	var same *svcBelief
	for _, b := range s.holding {
		if b.token == a.token {
			same = b
			continue
		}
		if !s.r.stopped(b) && b.open() {
			s.r.violation("two tokens for one grant: session %d's acquire of %q (sent %v ago to %s, held=%v) answered token %d while the session holds it with token %d",
				a.sess.id, svcLocks[0], time.Since(a.sent).Round(time.Millisecond), a.ep, a.held, a.token, b.token)
		}
	}
	if s.granted[a.token] {
		s.r.h.markKept(a.op, a.token)
	} else {
		s.granted[a.token] = true
		s.grants++
		s.r.h.end(a.op, Granted, a.token)
	}
	if same != nil && !s.r.stopped(same) || s.released[a.token] {
		// The grant it acts on already, or one it released: an answer
		// in flight while it released (a stale one is checked above).
		return nil
	}
	until := a.sent.Add(a.lease)
	if a.lease <= 0 || !time.Now().Before(until) {
		return nil // it promises nothing: not acted on (the group frees it)
	}
	b := &svcBelief{client: s.id, session: a.sess.id, secret: a.sess.secret, name: svcLocks[0], token: a.token, split: true, until: until,
		open: func() bool { return time.Now().Before(until) }}
	s.r.hold(b)
	s.holding = append(s.holding, b)
	return b
}

// run loops over rounds: an acquire sent to two replicas at once, acted on
// as soon as one grants; the other answer is taken whenever it comes.
func (s *svcSplit) run(ctx context.Context) {
	for ctx.Err() == nil {
		if s.cut.Load() {
			// Cut off: what it would send never arrives, so it sends
			// nothing (the history records no call that never was).
			wait(ctx, 10*time.Millisecond)
			continue
		}
		if s.isLost() {
			// Its session was lost (a violation already): it goes on
			// with a new one, as a process would.
			if err := s.create(ctx); err != nil {
				wait(ctx, 50*time.Millisecond)
			}
			continue
		}
		s.mu.Lock()
		pending := s.pending
		s.pending = nil
		s.mu.Unlock()
		for _, b := range pending {
			s.act(ctx, b)
		}
		answers := make(chan splitAnswer, 2)
		for _, ep := range s.two(s.rng) {
			s.late.Add(1)
			go func() {
				defer s.late.Done()
				answers <- s.acquire(ctx, ep)
			}()
		}
		var got *svcBelief
		n := 0
		for ; n < 2 && got == nil; n++ {
			got = s.answer(<-answers)
		}
		if n < 2 {
			s.late.Add(1)
			go func() {
				defer s.late.Done()
				if b := s.answer(<-answers); b != nil {
					s.mu.Lock()
					s.pending = append(s.pending, b)
					s.mu.Unlock()
				}
			}()
		}
		if got != nil {
			s.act(ctx, got)
		} else {
			wait(ctx, time.Duration(1+s.rng.IntN(5))*time.Millisecond)
		}
	}
}

func (s *svcSplit) isLost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// holds reports whether the split client acts on a grant now.
func (s *svcSplit) holds() bool { return s.held() != nil }

// act makes three fenced writes with b, svcSplitGap apart, while its lease
// lasts, then releases it (after its lease too: the group holds it for the
// session). Stopping (ctx), it keeps the grant for the end to close.
func (s *svcSplit) act(ctx context.Context, b *svcBelief) {
	for k := range 3 {
		if ctx.Err() != nil {
			return
		}
		if !b.open() {
			break
		}
		s.r.write(b)
		if k < 2 {
			wait(ctx, svcSplitGap)
		}
	}
	// Cut off, it cannot release: it works on while its lease lasts, the
	// longest a holder may, so that the group's next grant measures the
	// margin the lease keeps.
	for s.cut.Load() && b.open() && ctx.Err() == nil {
		s.r.write(b)
		wait(ctx, svcSplitGap)
	}
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	s.released[b.token] = true
	s.mu.Unlock()
	if b.open() {
		s.r.stop(b, time.Now(), false)
	} else {
		s.r.stop(b, b.until, true)
	}
	i := s.r.h.begin(Op{Client: s.id, Kind: OpRelease, Lock: b.name, Session: b.session, Token: b.token})
	// A release whose outcome is unknown (every replica timed out, as
	// under a partition) is sent again until one answers: its live session
	// would keep the lock for good otherwise, as a real client's would. A
	// release is idempotent by its token, so a retry never ends another
	// grant.
	out := Unknown
	eps := append([]string(nil), s.eps...)
	for out == Unknown && !s.isLost() {
		s.rng.Shuffle(len(eps), func(i, j int) { eps[i], eps[j] = eps[j], eps[i] })
		for _, ep := range eps {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), svcOpTimeout/4)
			status, _, err := s.do(rctx, splitSession{id: b.session, secret: b.secret}, "POST", ep, splitLockPath("release"),
				map[string]any{"session_id": httpapiID(b.session), "fencing_token": httpapiID(b.token)}, nil)
			cancel()
			if err == nil && status == http.StatusOK {
				out = OK
				break
			}
			if err == nil && status == http.StatusConflict {
				out = NotHeld
				break
			}
		}
		if out == Unknown && wait(ctx, 50*time.Millisecond) != nil {
			break
		}
	}
	s.r.h.end(i, out, 0)
	if out == OK {
		s.r.releasedLapsed(b) // the group ended it by this release, not by expiry
	}
	s.mu.Lock()
	for k, h := range s.holding {
		if h == b {
			s.holding = append(s.holding[:k], s.holding[k+1:]...)
			break
		}
	}
	s.mu.Unlock()
}

// close ends the split client's session and drops its connections.
func (s *svcSplit) close(ctx context.Context) {
	for _, ep := range s.eps {
		cctx, cancel := context.WithTimeout(ctx, svcOpTimeout)
		sess := s.cur()
		status, _, err := s.do(cctx, sess, "DELETE", ep, sess.path(), nil, nil)
		cancel()
		if err == nil && (status == http.StatusNoContent || status == http.StatusNotFound) {
			break
		}
	}
	s.tr.CloseIdleConnections()
}

// held returns the grant the split client acts on now, if any.
func (s *svcSplit) held() *svcBelief {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.holding {
		if !s.r.stopped(b) && b.open() {
			return b
		}
	}
	return nil
}
