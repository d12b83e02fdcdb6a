package fsm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// openMany opens n sessions, MaxBatch per entry, and returns their IDs.
func openMany(h *harness, nonce0 uint64, n int) []uint64 {
	var ids []uint64
	for len(ids) < n {
		var cmds []Command
		for len(cmds) < min(MaxBatch, n-len(ids)) {
			cmds = append(cmds, openCmd(nonce0+uint64(len(ids)+len(cmds))))
		}
		rs, _ := h.apply(cmds...)
		for _, r := range rs {
			require.Equal(h.tb, OK, r.Status)
			ids = append(ids, r.Value)
		}
	}
	return ids
}

func TestSessionLimit(t *testing.T) {
	h := newHarness(t)
	ids := openMany(h, 1, MaxSessions)
	rs, _ := h.apply(openCmd(1), openCmd(MaxSessions+1))
	require.Equal(t, Result{Status: OK, Value: ids[0]}, rs[0], "a retried open still finds its session")
	require.Equal(t, Result{Status: LimitExceeded, Value: uint64(LimitSessions)}, rs[1])
	sessions, _, _ := h.st.Counts()
	require.Equal(t, MaxSessions, sessions)

	h.apply(closeCmd(ids[7]))
	rs, _ = h.apply(openCmd(MaxSessions + 1))
	require.Equal(t, OK, rs[0].Status, "a freed slot can be used again")
}

func TestLocksPerSessionLimit(t *testing.T) {
	h := newHarness(t)
	ids := openMany(h, 1, 2)
	s, other := ids[0], ids[1]
	h.apply(acqCmd(other, 1, "queued", false))
	// The session holds all but one and waits for one: that is the limit.
	var seq uint64
	for seq < MaxLocksPerSession-1 {
		var cmds []Command
		for len(cmds) < MaxBatch && seq < MaxLocksPerSession-1 {
			seq++
			c := acqCmd(s, seq, fmt.Sprint("l", seq), false)
			c.Floor = seq // the client has its earlier replies
			cmds = append(cmds, c)
		}
		rs, _ := h.apply(cmds...)
		for _, r := range rs {
			require.Equal(t, Granted, r.Status)
		}
	}
	rs, _ := h.apply(acqCmd(s, seq+1, "queued", true))
	require.Equal(t, Queued, rs[0].Status)
	rs, _ = h.apply(acqCmd(s, seq+2, "one-more", false), acqCmd(s, seq+3, "queued", true))
	require.Equal(t, Result{Status: LimitExceeded, Value: uint64(LimitLocksPerSession)}, rs[0])
	require.Equal(t, Result{Status: LimitExceeded, Value: uint64(LimitLocksPerSession)}, rs[1])
	require.False(t, h.st.Lock("one-more").Held, "a refused acquire leaves nothing behind")
	require.Equal(t, 1, h.st.Lock("queued").Waiters)
	rs, _ = h.apply(acqCmd(s, seq+2, "one-more", false))
	require.Equal(t, Result{Status: LimitExceeded, Value: uint64(LimitLocksPerSession)}, rs[0], "a retry gets the first reply")

	h.apply(relCmd(s, seq+4, "l1", h.st.Lock("l1").Token))
	rs, _ = h.apply(acqCmd(s, seq+5, "one-more", false))
	require.Equal(t, Granted, rs[0].Status, "a released lock frees a slot")
}

func TestWaitersPerLockLimit(t *testing.T) {
	h := newHarness(t)
	ids := openMany(h, 1, MaxWaitersPerLock+2)
	holder, late := ids[0], ids[len(ids)-1]
	h.apply(acqCmd(holder, 1, "hot", false))
	waiters := ids[1 : len(ids)-1]
	for i := 0; i < len(waiters); i += MaxBatch {
		var cmds []Command
		for _, w := range waiters[i:min(i+MaxBatch, len(waiters))] {
			cmds = append(cmds, acqCmd(w, 1, "hot", true))
		}
		rs, _ := h.apply(cmds...)
		for _, r := range rs {
			require.Equal(t, Queued, r.Status)
		}
	}
	rs, _ := h.apply(acqCmd(late, 1, "hot", true), acqCmd(late, 2, "hot", false))
	require.Equal(t, Result{Status: LimitExceeded, Value: uint64(LimitWaitersPerLock)}, rs[0])
	require.Equal(t, Locked, rs[1].Status, "TryAcquire never queues, so the queue's limit does not concern it")
	require.Equal(t, MaxWaitersPerLock, h.st.Lock("hot").Waiters)

	h.apply(cancelCmd(waiters[0], 1))
	rs, _ = h.apply(acqCmd(late, 3, "hot", true))
	require.Equal(t, Queued, rs[0].Status)
}

// The limits hold for a W6-sized group: 10,000 sessions with 100 locks each.
func TestLimitsLeaveRoomForTheScaleWorkload(t *testing.T) {
	require.GreaterOrEqual(t, MaxSessions, 10*10_000)
	require.GreaterOrEqual(t, MaxLocksPerSession, 10*100)
	require.GreaterOrEqual(t, MaxSessions*MaxLocksPerSession, 1_000_000)
}
