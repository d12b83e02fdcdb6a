package fsm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pageState builds a state with 3 sessions (owners 1, 2, 3) and 60 locks
// under two prefixes, some with queues.
func pageState(t testing.TB) (*State, []uint64, []string) {
	h := newHarness(t)
	var sessions []uint64
	for i := uint64(1); i <= 3; i++ {
		c := openCmd(100 + i)
		c.Owner = i
		r, _ := h.one(c)
		sessions = append(sessions, r.Value)
	}
	var names []string
	seq := map[uint64]uint64{}
	for i := range 60 {
		name := fmt.Sprintf("%s/%02d", []string{"jobs", "leases"}[i%2], i)
		names = append(names, name)
		s := sessions[i%3]
		seq[s]++
		r, _ := h.one(acqCmd(s, seq[s], name, true))
		require.Equal(t, Granted, r.Status)
		for q := 1; q <= i%4; q++ { // up to 3 waiters from the other sessions
			w := sessions[(i+q)%3]
			seq[w]++
			r, _ := h.one(acqCmd(w, seq[w], name, true))
			require.Equal(t, Queued, r.Status)
		}
	}
	slices.Sort(names)
	return h.st, sessions, names
}

func TestLocksPageListsEveryMatchOnceInOrder(t *testing.T) {
	st, sessions, names := pageState(t)
	owners := map[uint64]uint64{sessions[0]: 1, sessions[1]: 2, sessions[2]: 3}
	for _, prefix := range []string{"", "jobs/", "leases/1", "nothing"} {
		var want []string
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				want = append(want, n)
			}
		}
		for _, limit := range []int{1, 7, 30, 100} {
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				require.Less(t, pages, 100)
				page, more := st.LocksPage(prefix, after, limit, 2)
				require.LessOrEqual(t, len(page), limit)
				for _, e := range page {
					got = append(got, e.Name)
					require.True(t, e.Held)
					require.Equal(t, owners[e.Session], e.Owner, "the holder's owning replica")
					require.Equal(t, st.Lock(e.Name), e.LockInfo)
					require.Len(t, e.Queue, min(e.Waiters, 2), "the queue is cut at 2")
					for _, w := range e.Queue {
						require.NotEqual(t, e.Session, w, "here every waiter is another session")
						require.Contains(t, sessions, w)
					}
				}
				if !more {
					break
				}
				require.Len(t, page, limit, "a page with more after it is full")
				after = page[len(page)-1].Name
			}
			require.Equal(t, want, got, "prefix %q limit %d", prefix, limit)
		}
	}
	page, more := st.LocksPage("", "", 0, 0)
	require.Empty(t, page)
	require.False(t, more)
}

func TestSessionsPage(t *testing.T) {
	st, sessions, _ := pageState(t)
	page, more := st.SessionsPage(0, 2)
	require.True(t, more)
	require.Equal(t, []uint64{sessions[0], sessions[1]}, []uint64{page[0].ID, page[1].ID})
	require.Equal(t, uint64(1), page[0].Owner)
	require.Equal(t, 20, page[0].Held)
	page, more = st.SessionsPage(page[1].ID, 2)
	require.False(t, more)
	require.Len(t, page, 1)
	require.Equal(t, sessions[2], page[0].ID)
	require.Equal(t, uint64(3), page[0].Owner)
	all, _ := st.SessionsPage(0, 10)
	require.Equal(t, st.Sessions(), all)
}

// BenchmarkLocksPage measures one page of 1000 out of a million held locks:
// the cost of a listing page on a large group.
func BenchmarkLocksPage(b *testing.B) {
	st := New()
	const n = 1_000_000
	// One session holds at most MaxLocksPerSession: spread the locks.
	st.Apply(1, openCmds(n/MaxLocksPerSession))
	sessions := st.Sessions()
	require.Len(b, sessions, n/MaxLocksPerSession)
	batch := make([]Command, 0, MaxBatch)
	idx := uint64(2)
	for i := range n {
		id := sessions[i/MaxLocksPerSession].ID
		// Floor: the client has every earlier reply; else a session's
		// MaxPendingPerSession unacknowledged replies refuse the rest.
		c := acqCmd(id, uint64(i+1), fmt.Sprintf("lock/%07d", i), false)
		c.Floor = c.Seq
		batch = append(batch, c)
		if len(batch) == MaxBatch || i == n-1 {
			st.Apply(idx, batch)
			idx++
			batch = batch[:0]
		}
	}
	_, locks, _ := st.Counts()
	require.Equal(b, n, locks)
	b.ResetTimer()
	for b.Loop() {
		page, _ := st.LocksPage("lock/", "lock/0500000", 1000, 16)
		if len(page) != 1000 {
			b.Fatal(len(page))
		}
	}
}
