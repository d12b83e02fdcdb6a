package fsm

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// contendedRef is Contended by brute force: every lock, sorted.
func contendedRef(st *State, n int) []string {
	var all []*lock
	for l := range st.locks.all {
		if l.waiters() > 0 {
			all = append(all, l)
		}
	}
	slices.SortFunc(all, func(a, b *lock) int {
		if c := cmp.Compare(b.waiters(), a.waiters()); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	var out []string
	for _, l := range all[:min(len(all), max(0, min(n, MaxContended)))] {
		out = append(out, l.name)
	}
	return out
}

func contendedNames(infos []LockInfo) []string {
	var out []string
	for _, l := range infos {
		out = append(out, l.Name)
	}
	return out
}

func TestContended(t *testing.T) {
	const t0 = 1_780_000_000_000_000_000
	h := newHarness(t)
	var ids []uint64
	for i := range 6 {
		r, _ := h.one(namedOpen(uint64(i+1), fmt.Sprint("worker-", i), t0))
		ids = append(ids, r.Value)
	}
	seq := uint64(0)
	acquire := func(s int, name string, at uint64) Result {
		seq++
		c := acqCmd(ids[s], seq, name, true)
		c.At = at
		r, _ := h.one(c)
		return r
	}
	// Queue lengths: c/3 3, b/2 and a/2 2 (a tie, broken by name), d/1 1;
	// e/held held by nobody waiting; an election with candidates.
	queues := map[string]int{"c/3": 3, "b/2": 2, "a/2": 2, "d/1": 1, "e/held": 0}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range queues {
			if !yield(n) {
				return
			}
		}
	}) {
		require.Equal(t, Granted, acquire(0, name, t0+1).Status)
		for i := range queues[name] {
			require.Equal(t, Queued, acquire(i+1, name, t0+2).Status)
		}
	}
	h.one(campaignCmd(ids[0], 100, "E", "v"))
	for i := range 4 {
		h.one(campaignCmd(ids[i+1], 100, "E", "v"))
	}

	for _, tc := range []struct {
		n    int
		want []string
	}{
		{10, []string{"c/3", "a/2", "b/2", "d/1"}},
		{MaxContended + 1, []string{"c/3", "a/2", "b/2", "d/1"}},
		{2, []string{"c/3", "a/2"}},
		{1, []string{"c/3"}},
		{0, nil},
		{-1, nil},
	} {
		require.Equal(t, tc.want, contendedNames(h.st.Contended(tc.n)), "n=%d", tc.n)
		require.Equal(t, tc.want, contendedRef(h.st, tc.n), "the reference agrees, n=%d", tc.n)
	}
	top := h.st.Contended(1)[0]
	require.Equal(t, h.st.Lock("c/3"), top, "each as Lock describes it")
	require.Equal(t, 3, top.Waiters)
	require.Equal(t, []Holder{{Session: ids[0], Seq: top.Seq, Token: top.Token, Name: "worker-0", Owner: 1, GrantedAt: t0 + 1}},
		top.Holders)

	// The index follows the queues: a cancel shortens one, an end of a
	// session leaves several, a release passes a lock on.
	c := cancelCmd(ids[1], h.st.sessions[ids[1]].waitSeq("c/3"))
	h.one(c)
	require.Equal(t, []string{"a/2", "b/2", "c/3", "d/1"}, contendedNames(h.st.Contended(10)))
	h.one(closeCmd(ids[2])) // waits for a/2, b/2, c/3: each has one waiter left, as d/1
	require.Equal(t, []string{"a/2", "b/2", "c/3", "d/1"}, contendedNames(h.st.Contended(10)))
	l := h.st.Lock("d/1")
	h.one(relCmd(ids[0], 200, "d/1", l.Token)) // granted to its only waiter
	require.Equal(t, []string{"a/2", "b/2", "c/3"}, contendedNames(h.st.Contended(10)))
	require.Equal(t, contendedNames(h.st.Contended(10)), contendedNames(roundTrip(t, h.st).Contended(10)),
		"a restored state indexes alike")
}

// waitSeq returns the request s waits for lock name with.
func (s *session) waitSeq(name string) uint64 {
	for seq, w := range s.waits {
		if w.l.name == name {
			return seq
		}
	}
	return 0
}

// Contended agrees with the brute-force ranking over the driver's
// programs, and its index with the queues after every entry (the harness
// checks that).
func TestContendedMatchesReference(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		d := newDriver(rand.New(rand.NewPCG(seed, 0xc0)))
		h := newHarness(t)
		seen := 0
		for i := range 1500 {
			cmds := d.entry()
			rs, evs := h.apply(cmds...)
			d.observe(cmds, rs, evs)
			if i%10 == 0 {
				for _, n := range []int{1, 2, 3, 10} {
					got := contendedNames(h.st.Contended(n))
					require.Equal(t, contendedRef(h.st, n), got, "entry %d, n=%d", i, n)
					seen += len(got)
				}
			}
		}
		require.Positive(t, seen, "the programs made queues")
	}
}

// BenchmarkContended ranks the most contended locks of a million held
// ones, of which contended have queues: its cost grows with the
// contended locks, not with the held ones.
func BenchmarkContended(b *testing.B) {
	for _, contended := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("locks=1M/contended=%d", contended), func(b *testing.B) {
			st := New()
			const n = 1_000_000
			const sessions = n / MaxLocksPerSession
			st.Apply(1, openCmds(sessions+3))
			all := st.Sessions()
			waiters := all[sessions:] // hold nothing: they wait for the contended
			batch := make([]Command, 0, MaxBatch)
			idx := uint64(2)
			flush := func() {
				st.Apply(idx, batch)
				idx++
				batch = batch[:0]
			}
			for i := range n {
				// Floor: the client has every earlier reply (a session keeps
				// at most MaxPendingPerSession unacknowledged).
				c := acqCmd(all[i/MaxLocksPerSession].ID, uint64(i+1), fmt.Sprintf("lock/%07d", i), false)
				c.Floor = c.Seq
				batch = append(batch, c)
				if len(batch) == MaxBatch {
					flush()
				}
			}
			// Queues of 1 to 3 requests on every (n/contended)th lock.
			for i := range contended {
				for k := range 1 + i%3 {
					c := acqCmd(waiters[k].ID, uint64(n+i*3+k+1), fmt.Sprintf("lock/%07d", i*(n/contended)), true)
					c.Floor = c.Seq
					batch = append(batch, c)
					if len(batch) == MaxBatch {
						flush()
					}
				}
			}
			flush()
			_, locks, waiting := st.Counts()
			require.Equal(b, n, locks)
			require.Equal(b, contended/3*6+[]int{0, 1, 3}[contended%3], waiting)
			b.ResetTimer()
			for b.Loop() {
				if got := st.Contended(MaxContended); len(got) != min(contended, MaxContended) {
					b.Fatal(len(got))
				}
			}
		})
	}
}
