package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// A part waiting for its resume, on a replica that restores a snapshot
// taken before the session was opened (a lagging replica catching up), is
// not expired for it: the resume applies after the snapshot, and the grant
// it keeps must reach the part. The fault checker caught the opposite (a
// resumed session whose Locks lacked the lock its group kept; leader-crash).
func TestResumingPartSurvivesAnOlderSnapshot(t *testing.T) {
	h := NewHost(Config{ReplicaID: 2, ProposalTimeout: time.Second, RTT: 10 * time.Millisecond,
		Clock: clock.Real, Log: quiet, Groups: &testGroups{m: map[string]Group{}}, UnknownGroup: errUnknown})
	t.Cleanup(func() { h.Close(replica.ErrClosed) })

	// The group's history: the session opens at 20, is granted "x" at 21
	// and is resumed by this replica's attempt at 22.
	const nonce, attempt, ttl = 77, 9001, uint64(10 * time.Second)
	before := fsm.New() // a snapshot from before the open
	before.Apply(10, []fsm.Command{{Kind: fsm.KindOpenSession, Nonce: 5, TTL: ttl}})
	after := fsm.New()
	after.Apply(10, []fsm.Command{{Kind: fsm.KindOpenSession, Nonce: 5, TTL: ttl}})
	rs, _ := after.Apply(20, []fsm.Command{{Kind: fsm.KindOpenSession, Nonce: nonce, TTL: ttl}})
	id := rs[0].Value
	rs, _ = after.Apply(21, []fsm.Command{{Kind: fsm.KindAcquire, Session: id, Seq: 1, Name: "x", Wait: true}})
	require.Equal(t, fsm.Granted, rs[0].Status)
	rs, _ = after.Apply(22, []fsm.Command{{Kind: fsm.KindResume, Session: id, Nonce: nonce, Owner: 2, Target: attempt, TTL: ttl}})
	require.Equal(t, fsm.OK, rs[0].Status)

	s := h.newSession(Options{TTL: time.Duration(ttl), Margin: time.Second}, nil)
	rt := h.router("b")
	p := rt.newPart(s, id, nonce)
	p.resume.Store(attempt)
	rt.mu.Lock()
	rt.parts[id] = p
	rt.mu.Unlock()

	rt.Restored(before)
	require.False(t, p.ended(), "a snapshot from before the session's open does not end the part waiting for its resume")
	require.Empty(t, p.held(false))

	rt.Restored(after)
	require.False(t, p.ended())
	held := p.held(false)
	require.Len(t, held, 1, "the snapshot that covers the resume hands the part the grant it kept")
	require.Equal(t, "x", held[0].Name())
	require.Equal(t, uint64(21)<<fsm.TokenShift, held[0].Token())
	require.Zero(t, p.resume.Load(), "the resume is over")
}
