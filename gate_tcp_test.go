package fencelock

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
)

// Issue 48, item 8, the version gate's first suspicion, over real TCP: the
// default group's leader reads the membership, finds that every member
// reads this build's version, and proposes the raise; in between, replica 4, which
// announces that it reads no more than the baseline (as a build before the
// gate does), is added and connects. Its TCP connections' handshakes ran
// while the group wrote the baseline, and are not run again. Replica 4
// must never be sent an entry of a version it did not say it reads: the
// others write the raised version and it stays at the baseline, and the leader says why.
// (On transport.Network every batch runs the handshake's check, which
// hides this: the test needs sockets.)
func TestGateRaiseSendsNothingNewToAMemberAddedMeanwhile(t *testing.T) {
	rec := newRecorder()
	logger := slog.New(rec)
	var mu sync.Mutex
	old := map[uint64]bool{3: true, 4: true}
	announce := func(cfg *Config) {
		cfg.Logger = logger
		mu.Lock()
		defer mu.Unlock()
		if old[cfg.ReplicaID] {
			testhook.Announce(cfg, fsm.Baseline)
		}
	}
	c := newTCPCluster(t, 3, announce)
	ctx := testCtx(t)
	c.leader(ctx)
	reads := fsm.Reads() // what this build writes once the gate rises
	baseline, raised := Formats{Codec: fsm.Baseline.Codec, Snapshot: fsm.Baseline.Snapshot}, Formats{Codec: reads.Codec, Snapshot: reads.Snapshot}
	require.Equal(t, baseline, c.node(1).Status().Writes, "replica 3 holds the gate")

	// Every raise stops in the gap until the test lets it go.
	inGap, goOn := make(chan struct{}, 3), make(chan struct{})
	for _, n := range c.nodes {
		n.host.Shard("").TestingHoldGateRaise(func() {
			inGap <- struct{}{}
			<-goOn
		})
	}
	released := false
	defer func() {
		if !released {
			close(goOn)
		}
	}()
	c.stop(3)
	mu.Lock()
	old[3] = false
	mu.Unlock()
	c.start(3)
	select {
	case <-inGap: // the leader read {1, 2, 3}: all read this build's versions
	case <-ctx.Done():
		t.Fatal("the leader never tried to raise the gate")
	}

	cfg4 := joinConfig(t, c, 4)
	announce(&cfg4)
	require.NoError(t, c.node(1).AddNonVoting(ctx, 4, cfg4.Addr), "the group writes the baseline: replica 4 reads it")
	n4 := startJoined(t, c, cfg4)
	waitUntil(t, ctx, "replica 4 hears from the leader", func() bool { return n4.Status().LeaderID != 0 })
	require.Equal(t, baseline, n4.Status().Writes)

	close(goOn)
	released = true
	require.Eventually(t, func() bool {
		for id := uint64(1); id <= 3; id++ {
			if c.node(id).Status().Writes != raised {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "replicas 1 to 3 write this build's versions after the raise")

	// Either the leader holds the new entries back from replica 4 and
	// says so, or replica 4 applies them.
	heldBack := func() bool {
		for _, r := range rec.all() {
			if strings.Contains(r.msg, "replica 4 reads log versions up to 8") && strings.Contains(r.msg, "not sent") {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool { return heldBack() || n4.Status().Writes != baseline }, 30*time.Second, 20*time.Millisecond,
		"the leader neither held the raise back from replica 4 nor sent it")
	require.Equal(t, baseline, n4.Status().Writes,
		"replica 4 announced that it reads the baseline and applied the raise: it was sent entries it cannot read")
	_, err := c.node(1).Members(context.Background())
	require.NoError(t, err, "the group goes on")
}
