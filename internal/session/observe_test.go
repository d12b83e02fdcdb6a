package session

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestWatchesCoalesceAndRestore(t *testing.T) {
	ws := newWatches()
	w := ws.add("e")
	require.Same(t, w, ws.add("e"), "observers of one election share a watch")
	latest, changed := ws.load(w)
	require.Zero(t, latest.index, "nothing applied yet")

	ws.applied(7, &fsm.Event{Kind: fsm.EventDeposed, Name: "e", Session: 1, Token: 5})
	ws.applied(7, &fsm.Event{Kind: fsm.EventElected, Name: "e", Session: 2, Token: 9, Value: "b"})
	ws.applied(7, &fsm.Event{Kind: fsm.EventElected, Name: "other", Session: 2, Token: 10})
	require.False(t, closed(changed), "observers wake once the entry is applied")
	ws.notify()
	require.True(t, closed(changed))
	latest, changed = ws.load(w)
	require.Equal(t, observed{Leader{Election: "e", Value: "b", Token: 9, Session: 2}, 7}, latest)
	ws.notify()
	require.False(t, closed(changed), "no change, no wake-up")

	ws.applied(8, &fsm.Event{Kind: fsm.EventProclaimed, Name: "e", Session: 2, Token: 9, Value: "c"})
	ws.notify()
	require.True(t, closed(changed))
	latest, changed = ws.load(w)
	require.Equal(t, observed{Leader{Election: "e", Value: "c", Token: 9, Session: 2}, 8}, latest)

	st := fsm.New()
	rs, _ := st.Apply(20, []fsm.Command{{Kind: fsm.KindOpenSession, Nonce: 1, TTL: 1}})
	id := rs[0].Value
	st.Apply(21, []fsm.Command{{Kind: fsm.KindCampaign, Session: id, Seq: 1, Name: "e", Value: "restored"}})
	ws.restored(st)
	require.True(t, closed(changed))
	latest, _ = ws.load(w)
	require.Equal(t, observed{Leader{Election: "e", Value: "restored", Token: 21 << fsm.TokenShift, Session: id}, 21}, latest)

	ws.remove(w)
	require.Len(t, ws.m, 1)
	ws.remove(w)
	require.Empty(t, ws.m, "the last observer's watch is dropped")
}

// Observers that arrive while a read is in flight share the next one; a
// read nobody waits for any more is cancelled or never started.
func TestWatchesShareReads(t *testing.T) {
	ws := newWatches()
	w := ws.add("e")
	r1, start := ws.join(w)
	require.True(t, start, "the first observer starts a read")
	cancelled1 := false
	ws.started(r1, func() { cancelled1 = true })
	r2, start := ws.join(w)
	require.False(t, start, "one read in flight at a time")
	require.NotSame(t, r1, r2, "a read in flight began too early for a newcomer")
	r3, start := ws.join(w)
	require.False(t, start)
	require.Same(t, r2, r3, "newcomers share the next read")
	ws.leave(w, r3)
	require.Same(t, r2, w.next, "someone still waits for it")

	require.Same(t, r2, ws.finished(w), "the next read starts when the first ends")
	require.True(t, w.reading)
	cancelled2 := false
	ws.started(r2, func() { cancelled2 = true })
	ws.leave(w, r2)
	require.True(t, cancelled2, "nobody waits: the read is cancelled")
	require.False(t, cancelled1)
	require.Nil(t, ws.finished(w))
	require.False(t, w.reading)

	r4, start := ws.join(w)
	require.True(t, start)
	r5, _ := ws.join(w)
	ws.leave(w, r5)
	require.Nil(t, w.next, "a read nobody waits for is never started")
	ws.started(r4, func() {})
	require.Nil(t, ws.finished(w))
}
