package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// Two loops on two replicas: the second leads only after the first's work
// returned and it resigned, with a larger token; each loop returns
// ctx.Err() when its ctx ends; OnNewLeader reports both terms in order.
func TestRunElectionHandsOverOnlyAfterTheWorkReturned(t *testing.T) {
	c, ctx := newCluster(t, 3)
	events := make(chan termEvent, 16)
	gate := make(chan struct{})
	actx, stopA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() { aDone <- c.Node(1).RunElection(actx, "primary", "a", loopCallbacks("a", events, gate)) }()
	a := nextTerm(t, ctx, events)
	require.Equal(t, termEvent{who: "a", started: true, token: a.token}, a)

	leaders := make(chan fencelock.LeaderInfo, 16)
	bcb := loopCallbacks("b", events, nil)
	bcb.OnNewLeader = func(info fencelock.LeaderInfo) {
		select {
		case leaders <- info:
		default: // the test has read what it needs; never block the loop
		}
	}
	bctx, stopB := context.WithCancel(ctx)
	bDone := make(chan error, 1)
	go func() { bDone <- c.Node(2).RunElection(bctx, "primary", "b", bcb) }()
	first := <-leaders
	require.Equal(t, a.token, first.Token, "b sees a's term first")

	stopA() // a's work sees its ctx end, but is held at the gate
	info, err := c.Node(3).Leader(ctx, "primary")
	require.NoError(t, err)
	require.Equal(t, a.token, info.Token, "no resignation while the work runs")
	select {
	case e := <-events:
		t.Fatalf("%+v before a's work returned", e)
	default:
	}
	close(gate)
	// a's report of its stop and b's start race (b may be elected the
	// moment a resigned); a's work has returned before either.
	var b termEvent
	for range 2 {
		e := nextTerm(t, ctx, events)
		if e.who == "a" {
			require.Equal(t, termEvent{who: "a"}, e, "a stopped, resigned: no error")
			continue
		}
		b = e
	}
	require.Equal(t, "b", b.who)
	require.True(t, b.started)
	require.Greater(t, b.token, a.token)
	require.ErrorIs(t, <-aDone, context.Canceled)
	for info := range leaders {
		if info.Token == b.token {
			break
		}
		require.Less(t, info.Token, b.token, "leaders are reported in order")
	}
	stopB()
	require.Equal(t, termEvent{who: "b"}, nextTerm(t, ctx, events))
	require.ErrorIs(t, <-bDone, context.Canceled)
}

// Work that returns early resigns its term; the loop campaigns again and
// wins a new term with a larger token.
func TestRunElectionCampaignsAgainAfterTheWorkReturns(t *testing.T) {
	c, ctx := newCluster(t, 1)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	tokens := make(chan uint64, 4)
	stopped := make(chan error, 4)
	done := make(chan error, 1)
	go func() {
		done <- c.Node(1).RunElection(lctx, "job", "", fencelock.ElectionCallbacks{
			OnStartedLeading: func(ctx context.Context, l *fencelock.Leadership) {
				tokens <- l.Token()
				if len(tokens) == cap(tokens) {
					<-ctx.Done()
				}
			},
			OnStoppedLeading: func(err error) { stopped <- err },
		})
	}()
	first, second := <-tokens, <-tokens
	require.Greater(t, second, first)
	require.NoError(t, <-stopped, "a term whose work returned ends without an error")
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}

// A primary that restarts within its session's TTL and runs the loop again
// with its saved resume token keeps its term: the same epoch, and the
// other candidate never leads meanwhile.
func TestRunElectionResumesTheTermAfterARestart(t *testing.T) {
	c, ctx := newCluster(t, 3)
	events := make(chan termEvent, 16)
	saved := make(chan string, 4)
	cb := loopCallbacks("a", events, nil)
	work := cb.OnStartedLeading
	cb.OnStartedLeading = func(ctx context.Context, l *fencelock.Leadership) {
		saved <- l.Session().Resume().String()
		work(ctx, l)
	}
	aDone := make(chan error, 1)
	go func() { aDone <- c.Node(1).RunElection(ctx, "primary", "a", cb, fencelock.WithTTL(30*time.Second)) }()
	first := nextTerm(t, ctx, events)
	require.True(t, first.started)
	token := <-saved

	bctx, stopB := context.WithCancel(ctx)
	bDone := make(chan error, 1)
	go func() { bDone <- c.Node(2).RunElection(bctx, "primary", "b", loopCallbacks("b", events, nil)) }()
	waitUntil(t, ctx, "b is a candidate", func() bool {
		cands, err := c.Node(3).Candidates(ctx, "primary")
		require.NoError(t, err)
		return len(cands.Queue) == 1
	})

	c.Crash(1) // the primary's process dies
	require.ErrorIs(t, <-aDone, fencelock.ErrClosed)
	stopped := nextTerm(t, ctx, events)
	require.Equal(t, "a", stopped.who)
	require.False(t, stopped.started)
	c.Restart(1)
	tok, err := fencelock.ParseResumeToken(token)
	require.NoError(t, err)
	actx, stopA := context.WithCancel(ctx)
	go func() { aDone <- c.Node(1).RunElection(actx, "primary", "a2", cb, fencelock.WithResume(tok)) }()
	again := nextTerm(t, ctx, events)
	require.Equal(t, termEvent{who: "a", started: true, token: first.token}, again, "the same term goes on, and b never led")
	info, err := c.Node(3).Leader(ctx, "primary")
	require.NoError(t, err)
	require.Equal(t, "a2", info.Value, "the new run's value is proclaimed")

	stopA()
	require.ErrorIs(t, <-aDone, context.Canceled)
	// a's stop and b's start come in either order: b leads once a resigned,
	// and a reports its stop after the resignation too.
	var b termEvent
	for range 2 {
		if e := nextTerm(t, ctx, events); e.who == "b" {
			b = e
		} else {
			require.Equal(t, termEvent{who: "a"}, e)
		}
	}
	require.True(t, b.started)
	require.Greater(t, b.token, first.token)
	stopB()
	require.ErrorIs(t, <-bDone, context.Canceled)
}

// The holder stops first: when the leader's replica is cut off, the work's
// context ends (by the leader's own clock) before the other candidate's
// term begins.
func TestRunElectionWorkStopsBeforeASuccessorStarts(t *testing.T) {
	c, ctx := newCluster(t, 3)
	stopped := make(chan time.Time, 1)
	started := make(chan time.Time, 1)
	actx, stopA := context.WithCancel(ctx)
	defer stopA()
	aDone := make(chan error, 1)
	go func() {
		aDone <- c.Node(1).RunElection(actx, "primary", "a", fencelock.ElectionCallbacks{
			OnStartedLeading: func(ctx context.Context, l *fencelock.Leadership) {
				select {
				case started <- time.Time{}: // a leads
				default:
				}
				<-ctx.Done()
				select {
				case stopped <- time.Now():
				default:
				}
			},
		}, fencelock.WithTTL(time.Second))
	}()
	<-started
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	bStarted := make(chan time.Time, 1)
	bDone := make(chan error, 1)
	go func() {
		bDone <- c.Node(2).RunElection(bctx, "primary", "b", fencelock.ElectionCallbacks{
			OnStartedLeading: func(ctx context.Context, l *fencelock.Leadership) {
				select {
				case bStarted <- time.Now():
				default:
				}
				<-ctx.Done()
			},
		})
	}()
	waitUntil(t, ctx, "b is a candidate", func() bool {
		cands, err := c.Node(3).Candidates(ctx, "primary")
		require.NoError(t, err)
		return len(cands.Queue) == 1
	})
	c.Network().Isolate(c.Addr(1))
	defer c.Network().Heal()
	var aStop, bStart time.Time
	select {
	case bStart = <-bStarted:
	case <-ctx.Done():
		t.Fatal("b never led")
	}
	select {
	case aStop = <-stopped:
	default:
		t.Fatal("b leads while a's work still runs")
	}
	require.True(t, aStop.Before(bStart), "a's work stopped at %v, b's began at %v", aStop, bStart)
	stopB()
	require.ErrorIs(t, <-bDone, context.Canceled)
	c.Network().Heal()
	stopA()
	require.ErrorIs(t, <-aDone, context.Canceled)
}

type termEvent struct {
	who     string
	started bool // else stopped
	token   uint64
	err     error
}

// loopCallbacks reports each term's start and stop on events; the work
// runs until its ctx ends and then waits for gate (if any) before it
// returns.
func loopCallbacks(who string, events chan<- termEvent, gate <-chan struct{}) fencelock.ElectionCallbacks {
	return fencelock.ElectionCallbacks{
		OnStartedLeading: func(ctx context.Context, l *fencelock.Leadership) {
			events <- termEvent{who: who, started: true, token: l.Token()}
			<-ctx.Done()
			if gate != nil {
				<-gate
			}
		},
		OnStoppedLeading: func(err error) { events <- termEvent{who: who, err: err} },
	}
}

func nextTerm(t *testing.T, ctx context.Context, events <-chan termEvent) termEvent {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-ctx.Done():
		t.Fatalf("no term event: %v", ctx.Err())
		return termEvent{}
	}
}
