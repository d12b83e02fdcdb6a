package fencelock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// ElectionCallbacks are what RunElection calls. OnStartedLeading is
// required; the others may be nil.
type ElectionCallbacks struct {
	// OnStartedLeading runs the leader's work, in a goroutine of its own,
	// for one term: ctx ends when the term does (Leadership.Done) or when
	// RunElection's ctx ends. The term is resigned only after it returned,
	// so the work is never running while another leader's is.
	OnStartedLeading func(ctx context.Context, l *Leadership)
	// OnStoppedLeading runs once OnStartedLeading returned and the term is
	// over here (Leadership.Done closed), with why it ended: nil if it
	// ended because the work returned or ctx ended (the term is then
	// resigned), else the term's error (ErrSessionExpired, ErrNotLeader,
	// ...). It does not wait for the resignation when the term is already
	// over: a resign that cannot reach the group is attempted after it, or
	// meanwhile.
	OnStoppedLeading func(err error)
	// OnNewLeader runs for every change of the election's leader as this
	// replica applies it, this process's own terms included, in order; a
	// leaderless moment is reported with Token 0. It runs on a goroutine of
	// its own and must not block for long.
	OnNewLeader func(info LeaderInfo)
}

// RunElection campaigns in election with value until ctx ends, running
// cb.OnStartedLeading for each term it wins. When a term ends (the work
// returned, the session expired, the group resigned it) it waits a short,
// jittered while, opens a new session if the old one is over, and
// campaigns again. When ctx ends it stops the work, resigns, closes its
// session and returns ctx.Err(). It returns early only for a mistake in
// its arguments or a Node that is closed or removed.
//
// The loop is the one users of client-go's leaderelection or Curator's
// LeaderSelector write by hand: the work's context ends with the term, and
// the resignation waits for the work, so releasing on shutdown is safe by
// construction. A panic in a callback is not recovered.
//
// Given WithResume with the token of the session an earlier run of this
// process led with (l.Session().Resume(), saved in OnStartedLeading), a
// process restarted within the session's TTL resumes that session and its
// term: OnStartedLeading runs again with the same Leadership token, and no
// other candidate led meanwhile.
func (n *Node) RunElection(ctx context.Context, election, value string, cb ElectionCallbacks, opts ...SessionOption) error {
	if cb.OnStartedLeading == nil {
		return fmt.Errorf("%w: RunElection needs OnStartedLeading", ErrInvalidConfig)
	}
	if err := n.h.CheckCampaign(election, value); err != nil {
		return err
	}
	if cb.OnNewLeader != nil {
		var watching sync.WaitGroup
		wctx, stop := context.WithCancel(ctx)
		defer watching.Wait()
		defer stop()
		watching.Add(1)
		go func() {
			defer watching.Done()
			n.reportLeaders(wctx, election, cb.OnNewLeader)
		}()
	}
	loop := electionLoop{n: n, election: election, value: value, cb: cb, opts: opts}
	defer loop.closeSession()
	return loop.run(ctx)
}

// reportLeaders calls report for every leader change Observe sees.
func (n *Node) reportLeaders(ctx context.Context, election string, report func(LeaderInfo)) {
	var last LeaderInfo
	first := true
	for info := range n.Observe(ctx, election) {
		if info.Err != nil {
			return
		}
		if first || info.Token != last.Token {
			report(info)
		}
		first, last = false, info
	}
}

type electionLoop struct {
	n               *Node
	election, value string
	cb              ElectionCallbacks
	opts            []SessionOption
	resumed         bool // opts no longer resume
	s               *Session
}

func (e *electionLoop) run(ctx context.Context) error {
	pause := e.backoff()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		l, err := e.campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrRemoved) {
				return err
			}
			e.n.log.Warn("fencelock: campaign failed; trying again", "election", e.election, "err", err)
			if !pause.wait(ctx) {
				return ctx.Err()
			}
			continue
		}
		pause.reset()
		e.lead(ctx, l)
		if !pause.wait(ctx) {
			return ctx.Err()
		}
	}
}

// campaign waits to be elected, with a new session if the last one is over.
// A session resumed (WithResume) may lead already: then its term goes on.
func (e *electionLoop) campaign(ctx context.Context) (*Leadership, error) {
	if e.s == nil || e.s.Err() != nil {
		s, err := e.n.NewSession(ctx, e.opts...)
		if err != nil {
			return nil, err
		}
		e.s = s
		if !e.resumed { // resume only the first session
			e.opts, e.resumed = append(slices.Clip(e.opts), WithResume(ResumeToken{})), true
		}
		for _, l := range s.Leaderships() {
			if l.Election() != e.election {
				continue
			}
			if l.Value() != e.value {
				if err := l.Proclaim(ctx, e.value); err != nil {
					return nil, err
				}
			}
			return l, nil
		}
	}
	return e.s.Campaign(ctx, e.election, e.value)
}

// lead runs one term: the work, then the report and the resignation.
//
// OnStoppedLeading runs as soon as the term is over here (Done closed) and
// the work returned, not after the resignation: when the group cannot be
// reached the resign can only time out, and by then a successor may lead,
// so a report that waited for it would say "stepped down" too late. If the
// work returned while the term still holds, the report waits until the
// resignation ends it (or it ends on its own, by the holder's clock), so it
// never runs while this process still leads.
func (e *electionLoop) lead(ctx context.Context, l *Leadership) {
	term := l.Context(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.cb.OnStartedLeading(term, l)
	}()
	<-done
	why := l.Err() // before Resign: why the term ended, if it did on its own
	resigned := make(chan struct{})
	go func() {
		defer close(resigned)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.s.TTL())
		defer cancel()
		err := l.Resign(rctx)
		if err != nil && !errors.Is(err, ErrNotLeader) && why == nil {
			e.n.log.Warn("fencelock: resign failed; the term ends when the session does", "election", e.election, "err", err)
		}
		if resignAttempted != nil {
			resignAttempted(e.election, err)
		}
	}()
	if e.cb.OnStoppedLeading != nil {
		select {
		case <-l.Done():
		case <-resigned: // also a resign that failed: the report is due
		}
		e.cb.OnStoppedLeading(why)
	}
	<-resigned // the next campaign comes after this term's resignation
}

// resignAttempted, if set (by tests only, before any RunElection starts),
// is called when a term's resign attempt has ended, with its result.
var resignAttempted func(election string, err error)

// closeSession frees the loop's session at the group, so that its
// candidacy and term end now rather than a TTL later.
func (e *electionLoop) closeSession() {
	if e.s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(e.n.h.Context(), e.s.TTL())
	defer cancel()
	_ = e.s.Close(ctx)
}

// backoff spaces the loop's campaigns: a short jittered pause after a term
// or a failure, doubling while campaigns keep failing, up to the session
// TTL. The jitter keeps replicas that lost their leader together from
// campaigning in lockstep.
func (e *electionLoop) backoff() *retryPause {
	ttl := e.n.cfg.SessionTTL
	for _, f := range e.opts {
		var o sessionOptions
		o.apply([]SessionOption{f})
		if o.ttl != 0 {
			ttl = o.ttl
		}
	}
	base := min(max(ttl/20, 10*time.Millisecond), time.Second)
	return &retryPause{base: base, cur: base, limit: ttl}
}

type retryPause struct{ base, cur, limit time.Duration }

func (p *retryPause) reset() { p.cur = p.base }

// wait sleeps for a jittered pause and doubles the next one; it reports
// false if ctx ended first.
func (p *retryPause) wait(ctx context.Context) bool {
	d := p.cur/2 + rand.N(p.cur/2+1)
	p.cur = min(2*p.cur, p.limit)
	return sleepCtx(ctx, d)
}

// sleepCtx waits d, or until ctx ends; it reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
