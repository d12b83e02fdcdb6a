package replica

import (
	"testing"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/stretchr/testify/require"
)

func TestPickHandover(t *testing.T) {
	acked := map[uint64]uint64{2: 10, 3: 12, 4: 12, 5: 99}
	all := func(uint64) bool { return true }
	idx := func(id uint64) uint64 { return acked[id] }
	pickHandover := func(voters []uint64, self uint64, acked func(uint64) uint64, reachable func(uint64) bool) (uint64, bool) {
		return pickHandover(voters, self, acked, reachable, all)
	}

	to, ok := pickHandover([]uint64{1, 2, 3, 4}, 1, idx, all)
	require.True(t, ok)
	require.Equal(t, uint64(3), to, "the furthest along, then the lowest ID")

	to, ok = pickHandover([]uint64{1, 2, 3, 4}, 1, idx, func(id uint64) bool { return id == 2 })
	require.True(t, ok)
	require.Equal(t, uint64(2), to, "only reached voters")

	to, ok = pickHandover([]uint64{5, 1, 2}, 5, idx, all)
	require.True(t, ok)
	require.Equal(t, uint64(2), to, "never self")

	_, ok = pickHandover([]uint64{1}, 1, idx, all)
	require.False(t, ok, "a group of one has nobody to hand to")
	_, ok = pickHandover([]uint64{1, 2, 3}, 1, idx, func(uint64) bool { return false })
	require.False(t, ok, "no voter reached")

	to, ok = pickHandoverSettled([]uint64{1, 2, 3, 4}, 1, idx, all, func(id uint64) bool { return id == 2 })
	require.True(t, ok)
	require.Equal(t, uint64(2), to, "a settled voter before one just back from a restart, however far along")
	to, ok = pickHandoverSettled([]uint64{1, 3, 4}, 1, idx, all, func(uint64) bool { return false })
	require.True(t, ok)
	require.Equal(t, uint64(3), to, "none settled: the furthest along still")
}

var pickHandoverSettled = pickHandover

func TestProgressSettled(t *testing.T) {
	var p progress
	require.False(t, p.settled(2), "never heard")
	p.observe(pb.MessageBatch{Requests: []pb.Message{{Type: pb.HeartbeatResp, From: 2}}})
	require.False(t, p.settled(2), "just heard")
	p.mu.Lock()
	p.upSince[2] = time.Now().Add(-settle)
	p.heard[2] = time.Now().Add(-time.Millisecond)
	p.mu.Unlock()
	p.observe(pb.MessageBatch{Requests: []pb.Message{{Type: pb.HeartbeatResp, From: 2}}})
	require.True(t, p.settled(2), "heard without a silence for settle")
	p.mu.Lock()
	p.heard[2] = time.Now().Add(-2 * silentGap)
	p.mu.Unlock()
	p.observe(pb.MessageBatch{Requests: []pb.Message{{Type: pb.HeartbeatResp, From: 2}}})
	require.False(t, p.settled(2), "back after a silence: a restart")
}

func TestProgressObservesAcknowledgedAppends(t *testing.T) {
	var p progress
	p.observe(pb.MessageBatch{Requests: []pb.Message{
		{Type: pb.ReplicateResp, ShardID: 1, From: 2, LogIndex: 7},
		{Type: pb.ReplicateResp, ShardID: 1, From: 2, LogIndex: 5},               // older, out of order
		{Type: pb.ReplicateResp, ShardID: 1, From: 3, LogIndex: 9, Reject: true}, // a rejection says nothing of the match
		{Type: pb.Heartbeat, ShardID: 1, From: 3, LogIndex: 100},
		{Type: pb.ReplicateResp, ShardID: 2, From: 3, LogIndex: 4},
	}})
	require.Equal(t, uint64(7), p.index(1, 2))
	require.Equal(t, uint64(0), p.index(1, 3))
	require.Equal(t, uint64(4), p.index(2, 3))
	require.Equal(t, uint64(0), p.index(3, 1))
}

// A TimeoutNow reaching a replica with committed entries it has not applied
// yet waits until it has (raft would skip the campaign), and goes at once
// when nothing is pending.
func TestTimeoutNowWaitsForApply(t *testing.T) {
	r := &Replica{}
	testCore(&r.Core, "", 7, nil)
	h := &Host{cfg: Config{ElectionTicks: 1000, RTT: time.Millisecond}, closed: make(chan struct{})}
	h.gset.Store(&groupSet{byShard: map[uint64]*Replica{7: r}})
	defer h.wg.Wait()
	defer close(h.closed)
	h.prog.observe(pb.MessageBatch{Requests: []pb.Message{{Type: pb.Replicate, ShardID: 7, Commit: 10}}})
	r.AppliedIndex.Store(9)

	delivered := make(chan pb.MessageBatch, 1)
	deliver := func(b pb.MessageBatch) { delivered <- b }
	timeoutNow := pb.MessageBatch{Requests: []pb.Message{{Type: pb.TimeoutNow, ShardID: 7}}}
	require.True(t, h.holdTimeoutNow(timeoutNow, deliver), "held while entry 10 is not applied")
	select {
	case <-delivered:
		t.Fatal("delivered before the replica applied what it knows committed")
	default:
	}
	r.AppliedIndex.Store(10)
	b := <-delivered
	require.Equal(t, pb.TimeoutNow, b.Requests[0].Type)

	require.False(t, h.holdTimeoutNow(timeoutNow, deliver), "nothing pending: delivered by the caller at once")
	require.False(t, h.holdTimeoutNow(pb.MessageBatch{Requests: []pb.Message{{Type: pb.Replicate, ShardID: 7, Commit: 11}}}, deliver),
		"only TimeoutNow is held")
}

// A balancer target must answer now: a peer heard from a second ago (it
// stopped since) is not live, though the handshake's window still counts it
// as reached; one just back from a restart is not live either.
func TestBalancerTargetIsLive(t *testing.T) {
	h := &Host{cfg: Config{RTT: 10 * time.Millisecond, HeartbeatTicks: 2}}
	require.Equal(t, 100*time.Millisecond, h.freshness(), "no less than 100 ms")
	require.False(t, h.live(2), "never heard")

	h.prog.observe(pb.MessageBatch{Requests: []pb.Message{{Type: pb.HeartbeatResp, From: 2}}})
	require.False(t, h.live(2), "back from a restart a moment ago: not settled")

	h.prog.mu.Lock()
	h.prog.upSince[2] = time.Now().Add(-2 * settle)
	h.prog.heard[2] = time.Now()
	h.prog.mu.Unlock()
	require.True(t, h.live(2), "settled and heard from just now")

	h.prog.mu.Lock()
	h.prog.heard[2] = time.Now().Add(-time.Second)
	h.prog.mu.Unlock()
	require.False(t, h.live(2), "silent for a second: it stopped, whatever it was before")
	require.True(t, h.prog.heardWithin(2, 3*time.Second))
}

// A replica counts as taking part in a shard's log only once it answered
// that shard's leader (an append or a heartbeat), lately: hearing from it
// in another shard does not say it, nor does an answer from before a cut.
// caughtUp (package grouptable) promotes a new voter on this, so a voter cut off from a young
// group's leader is never promoted.
func TestAnsweredInTheShardItself(t *testing.T) {
	var p progress
	const def, g, other = 1, 2, 3
	p.observe(pb.MessageBatch{Requests: []pb.Message{{Type: pb.HeartbeatResp, From: 4, ShardID: def}}})
	require.True(t, p.heardWithin(4, time.Minute), "heard from in the default group")
	require.False(t, p.ackedWithin(g, 4, time.Minute), "heard from in the default group only: not in g's log")

	p.observe(pb.MessageBatch{Requests: []pb.Message{{Type: pb.ReplicateResp, From: 4, ShardID: g, LogIndex: 7}}})
	require.True(t, p.ackedWithin(g, 4, time.Minute), "acknowledged an append in g")
	require.Equal(t, uint64(7), p.index(g, 4))

	p.observe(pb.MessageBatch{Requests: []pb.Message{{Type: pb.HeartbeatResp, From: 4, ShardID: g}}})
	require.Equal(t, uint64(7), p.index(g, 4), "a heartbeat's answer carries no index and keeps the one acknowledged")

	p.observe(pb.MessageBatch{Requests: []pb.Message{{Type: pb.ReplicateResp, From: 4, ShardID: other, LogIndex: 9, Reject: true}}})
	require.False(t, p.ackedWithin(other, 4, time.Minute), "a rejected append is no answer that it follows the log")

	p.mu.Lock()
	a := p.acked[g][4]
	a.at = time.Now().Add(-time.Second)
	p.acked[g][4] = a
	p.mu.Unlock()
	require.False(t, p.ackedWithin(g, 4, 500*time.Millisecond), "silent in g for a second: cut off since")
}
