package shard

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/lockapi"
)

// A proposal other than LeaderStart waits for the group's ID (awaitGroupID):
// it goes once the ID is applied here, fails as unavailable (with ctx's error) if ctx
// ends first, and with lockapi.ErrClosed if the replica closes first.
func TestProposalsWaitForTheGroupID(t *testing.T) {
	r := testShard("")

	ctx, cancel := context.WithCancel(context.Background())
	failed := make(chan error, 1)
	go func() { failed <- r.awaitGroupID(ctx) }()
	cancel()
	// Unavailable, naming the wait, if ctx ended during it; ctx's error
	// alone if before (as Propose's own check reports a request never sent).
	err := <-failed
	require.ErrorIs(t, err, context.Canceled)
	if errors.Is(err, lockapi.ErrUnavailable) {
		require.ErrorContains(t, err, "group's ID")
	}

	waiting := make(chan error, 1)
	go func() { waiting <- r.awaitGroupID(context.Background()) }()
	r.SetGroupID(0xfeed) // wakes it, whenever it began to wait
	require.NoError(t, <-waiting)
	require.Equal(t, uint64(0xfeed), r.GroupID())
	r.SetGroupID(0xfeed) // applied again (a restart's replay): no second close
	done, stop := context.WithCancel(context.Background())
	stop()
	require.NoError(t, r.awaitGroupID(done), "known: no wait, whatever ctx")

	closing := testShard("")
	go func() { waiting <- closing.awaitGroupID(context.Background()) }()
	closing.End(nil, nil)
	require.ErrorIs(t, <-waiting, lockapi.ErrClosed)
}

// testShard is a shard of group name that was never started: enough for
// what needs no Dragonboat.
func testShard(name string) *Shard {
	r := &Shard{}
	r.Core.Init(slog.New(slog.DiscardHandler), 0, 0, name, 0, nil)
	return r
}
