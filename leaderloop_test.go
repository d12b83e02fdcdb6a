package fencelock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/testhook"
)

type termEvent struct {
	who     string
	started bool // else stopped
	token   uint64
	err     error
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

// A term lost to an expired session ends the work's context with the
// session's error; the loop opens a new session and leads again.
func TestRunElectionSurvivesSessionExpiry(t *testing.T) {
	c := newCluster(t, 1, nil)
	ctx := testCtx(t)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	events := make(chan termEvent, 8)
	froze := false
	done := make(chan error, 1)
	go func() {
		done <- c.node(1).RunElection(lctx, "job", "", ElectionCallbacks{
			OnStartedLeading: func(ctx context.Context, l *Leadership) {
				events <- termEvent{started: true, token: l.Token()}
				if !froze {
					froze = true
					testhook.Freeze(l.Session()) // its keep-alives stop: the session runs out
				}
				<-ctx.Done()
			},
			OnStoppedLeading: func(err error) { events <- termEvent{err: err} },
		}, WithTTL(300*time.Millisecond))
	}()
	first := nextTerm(t, ctx, events)
	lost := nextTerm(t, ctx, events)
	require.ErrorIs(t, lost.err, ErrSessionExpired)
	second := nextTerm(t, ctx, events)
	require.True(t, second.started)
	require.Greater(t, second.token, first.token)
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}

func TestRunElectionRefusesBadArguments(t *testing.T) {
	c := newCluster(t, 1, nil)
	ctx := testCtx(t)
	err := c.node(1).RunElection(ctx, "e", "", ElectionCallbacks{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	err = c.node(1).RunElection(ctx, "", "", ElectionCallbacks{OnStartedLeading: func(context.Context, *Leadership) {}})
	require.ErrorIs(t, err, ErrInvalidName)
	require.False(t, errors.Is(err, ErrInvalidConfig))
}

// OnStoppedLeading reports a term lost with the group unreachable as soon
// as the term is over, not after the resign that cannot commit: the leader's
// replica is cut off, its session runs out by its own clock, and the report
// comes before the resign attempt ends (which can only time out).
func TestRunElectionReportsTheStopBeforeTheResignEnds(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	const election = "unreachable-primary"
	type event struct {
		what string
		err  error
	}
	events := make(chan event, 8)
	resignAttempted = func(name string, err error) {
		if name == election {
			events <- event{"resign ended", err}
		}
	}
	t.Cleanup(func() { resignAttempted = nil }) // runs after RunElection returned
	led := make(chan struct{}, 1)
	actx, stopA := context.WithCancel(ctx)
	defer stopA()
	aDone := make(chan error, 1)
	go func() {
		aDone <- c.node(1).RunElection(actx, election, "a", ElectionCallbacks{
			OnStartedLeading: func(ctx context.Context, l *Leadership) {
				select {
				case led <- struct{}{}:
				default:
				}
				<-ctx.Done()
			},
			OnStoppedLeading: func(err error) { events <- event{"stopped", err} },
		}, WithTTL(time.Second))
	}()
	select {
	case <-led:
	case <-ctx.Done():
		t.Fatal("a never led")
	}
	c.net.Isolate(c.addr(1))
	defer c.net.Heal()
	first := <-events
	require.Equal(t, "stopped", first.what, "the stop is reported first (then: %v)", first.err)
	require.ErrorIs(t, first.err, ErrSessionExpired)
	var second event
	select {
	case second = <-events:
	case <-ctx.Done():
		t.Fatal("the resign attempt never ended")
	}
	require.Equal(t, "resign ended", second.what)
	require.Error(t, second.err, "the group was unreachable: the resign cannot have committed")
	require.NotErrorIs(t, second.err, ErrNotLeader)
	c.net.Heal()
	stopA()
	require.ErrorIs(t, <-aDone, context.Canceled)
}
