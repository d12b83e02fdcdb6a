package checker

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Shared locks and semaphores: each history below is legal or breaks one
// rule, and the model (or the section checks) says so.

func sgrant(client int, session, token uint64, shared bool, permits int, call, ret int64) Op {
	return Op{Client: client, Kind: OpAcquire, Lock: "S", Session: session, Token: token, Outcome: Granted,
		Shared: shared, Permits: permits, Call: call, Return: ret}
}

func srelease(client int, session, token uint64, out Outcome, call, ret int64) Op {
	op := release(client, session, token, out, call, ret)
	op.Lock = "S"
	return op
}

func stry(client int, session uint64, shared bool, permits int, call, ret int64) Op {
	return Op{Client: client, Kind: OpTryAcquire, Lock: "S", Session: session, Outcome: Locked,
		Shared: shared, Permits: permits, Call: call, Return: ret}
}

func sread(shared bool, at int64, holders ...Ref) Op {
	return Op{Client: -1, Kind: OpRead, Lock: "S", Held: len(holders) > 0, Shared: shared, Holders: holders,
		Outcome: OK, Call: at, Return: at}
}

func TestSharedModelAcceptsLegalHistories(t *testing.T) {
	rw := ids([]Op{
		sgrant(0, 1, 10, true, 0, 0, 10), // two readers at once
		sgrant(1, 2, 11, true, 0, 1, 12),
		stry(2, 3, false, 0, 13, 14),       // a writer's try while they read
		sgrant(2, 3, 20, false, 0, 15, 60), // the writer, once both released
		srelease(0, 1, 10, OK, 20, 30),
		srelease(1, 2, 11, OK, 40, 50),
		stry(0, 1, true, 0, 61, 62), // a reader's try while it writes
		{Client: 1, Kind: OpAcquire, Lock: "S", Session: 2, Shared: true, Outcome: Unknown, Call: 63, Return: never},
		srelease(2, 3, 20, OK, 70, 80),
		sgrant(0, 1, 30, true, 0, 90, 95),
		{Client: 1, Kind: OpLose, Lock: "S", Session: 2, Phantom: 8, Outcome: OK, Call: 63, Return: 300},
		sread(true, 200, Ref{Session: 1, Token: 30}),
	})
	require.Empty(t, linearizable(rw, SharedModel))
	require.Empty(t, sections(rw))

	sem := ids([]Op{
		sgrant(0, 1, 10, true, 2, 0, 10),
		sgrant(1, 2, 11, true, 2, 1, 12),
		stry(2, 3, true, 2, 13, 14), // both permits held
		sgrant(2, 3, 12, true, 2, 5, 40),
		srelease(0, 1, 10, NotHeld, 20, 30), // its session expired: Lose
		{Client: 0, Kind: OpLose, Lock: "S", Session: 1, Token: 10, Outcome: OK, Call: 10, Return: 30},
		srelease(1, 2, 11, OK, 50, 60),
		sread(true, 100, Ref{Session: 3, Token: 12}),
	})
	require.Empty(t, linearizable(sem, SharedModel))
	require.Empty(t, sections(sem))
}

func TestSharedModelRejects(t *testing.T) {
	for name, h := range map[string][]Op{
		"a reader while a writer holds": {
			sgrant(0, 1, 10, false, 0, 0, 10), sgrant(1, 2, 11, true, 0, 20, 30),
		},
		"a writer while a reader holds": {
			sgrant(0, 1, 10, true, 0, 0, 10), sgrant(1, 2, 11, false, 0, 20, 30),
		},
		"a third permit of two": {
			sgrant(0, 1, 10, true, 2, 0, 10), sgrant(1, 2, 11, true, 2, 0, 10), sgrant(2, 3, 12, true, 2, 20, 30),
		},
		"a lower token after a higher one": {
			sgrant(0, 1, 20, true, 0, 0, 10), sgrant(1, 2, 10, true, 0, 20, 30),
		},
		"a reader's try refused while free": {
			stry(0, 1, true, 0, 0, 10),
		},
		"a permit's try refused with a permit free": {
			sgrant(0, 1, 10, true, 2, 0, 10), stry(1, 2, true, 2, 20, 30),
		},
		"a release of a grant not held": {
			sgrant(0, 1, 10, true, 0, 0, 10), srelease(0, 1, 10, OK, 20, 30), srelease(0, 1, 10, OK, 40, 50),
		},
		"a holder forgotten by the final read": {
			sgrant(0, 1, 10, true, 0, 0, 10), sgrant(1, 2, 11, true, 0, 0, 10), sread(true, 20, Ref{Session: 1, Token: 10}),
		},
		"a read in the wrong mode": {
			sgrant(0, 1, 10, false, 0, 0, 10), sread(true, 20, Ref{Session: 1, Token: 10}),
		},
	} {
		t.Run(name, func(t *testing.T) {
			require.NotEmpty(t, linearizable(ids(h), SharedModel))
		})
	}
}

func TestSectionChecks(t *testing.T) {
	// A reader's certain section [10, 50] and a writer granted at 30 with a
	// higher token: the writer was granted while the reader held, whether
	// or not the writer's own section is certain.
	overlap := []Op{
		sgrant(0, 1, 10, true, 0, 0, 10), srelease(0, 1, 10, OK, 50, 60),
		sgrant(1, 2, 11, false, 0, 20, 30), srelease(1, 2, 11, NotHeld, 70, 80),
	}
	require.NotEmpty(t, sections(overlap))
	// The same reader's release failed: it may have lost the lock before
	// the writer's grant, and nothing is certain.
	uncertain := []Op{
		sgrant(0, 1, 10, true, 0, 0, 10), srelease(0, 1, 10, NotHeld, 50, 60),
		sgrant(1, 2, 11, false, 0, 20, 30), srelease(1, 2, 11, OK, 70, 80),
	}
	require.Empty(t, sections(uncertain))
	// Readers together are fine; three permits of two are not.
	require.Empty(t, sections([]Op{
		sgrant(0, 1, 10, true, 0, 0, 10), sgrant(1, 2, 11, true, 0, 0, 10),
		srelease(0, 1, 10, OK, 50, 60), srelease(1, 2, 11, OK, 50, 60),
	}))
	three := []Op{
		sgrant(0, 1, 10, true, 2, 0, 10), sgrant(1, 2, 11, true, 2, 0, 12), sgrant(2, 3, 12, true, 2, 0, 14),
		srelease(0, 1, 10, OK, 50, 60), srelease(1, 2, 11, OK, 50, 60),
	}
	require.NotEmpty(t, sections(three))
	// The first permit released before the third was granted: two at once.
	three[3].Call, three[3].Return = 13, 13
	require.Empty(t, sections(three))

	// A reader that saw a later writer's token while it held the lock.
	ops := []Op{sgrant(0, 1, 10, true, 0, 0, 10), srelease(0, 1, 10, OK, 50, 60)}
	require.NotEmpty(t, readsFenced(ops, map[string][]Read{"S": {{Client: 0, Token: 10, Seen: 11, At: 20}}}))
	require.Empty(t, readsFenced(ops, map[string][]Read{"S": {{Client: 0, Token: 10, Seen: 9, At: 20}}}))
}

func TestSharedLosesAreBoundedByExcludingGrants(t *testing.T) {
	ops := []Op{
		sgrant(0, 1, 10, true, 0, 0, 10),   // lost: its session expired
		sgrant(1, 2, 11, true, 0, 5, 15),   // a reader beside it: no bound
		sgrant(2, 3, 12, false, 0, 20, 40), // a writer: the reader was gone by then
	}
	ls := sharedLoses(ops, func(string) int64 { return 1000 })
	byToken := map[uint64]Op{}
	for _, l := range ls {
		byToken[l.Token] = l
	}
	require.Equal(t, int64(40), byToken[10].Return)
	require.Equal(t, int64(40), byToken[11].Return)
	require.Equal(t, int64(1000), byToken[12].Return)
}

// After a full restart every waiting call may fail with its outcome
// unknown: 24 possible phantom readers at once must not blow up the search
// (named phantoms would make 2^24 states, and a Lose each 24 more
// operations to order), and a phantom must still be gone before a writer
// is granted.
func phantomHistory(n int) []Op {
	var h []Op
	for i := range n {
		h = append(h, Op{Client: i, Kind: OpAcquire, Lock: "S", Session: uint64(i + 1), Shared: true,
			Outcome: Unknown, Call: int64(i), Return: never})
	}
	// Two readers' Trys refused: the lock was held, by phantoms only.
	h = append(h, stry(30, 31, true, 0, 100, 110), stry(31, 32, true, 0, 120, 130))
	h = append(h, sgrant(32, 33, 50, false, 0, 200, 300), srelease(32, 33, 50, OK, 310, 320))
	return ids(h)
}

// How long checking a history with many phantoms takes is the
// benchmark's business; the test checks the verdicts.
func BenchmarkSharedModelManyPhantoms(b *testing.B) {
	h := sharedHistory(phantomHistory(24), []Op{sread(false, 1000)})
	for b.Loop() {
		if res := linearizable(h, SharedModel); len(res) != 0 {
			b.Fatal(res)
		}
	}
}

func TestSharedModelManyPhantoms(t *testing.T) {
	require.Empty(t, linearizable(sharedHistory(phantomHistory(24), []Op{sread(false, 1000)}), SharedModel))

	// Every phantom gone before the writer was granted (it needs the lock
	// free), and none made after: the acquires of unknown outcome return
	// before the writer is called, as they do not in a run. A reader's Try
	// refused after the writer released has nothing to be refused by.
	// (Few phantoms: refuting a history tries every order of its
	// concurrent calls.)
	bad := phantomHistory(4)
	for i := range bad {
		if bad[i].Outcome == Unknown {
			bad[i].Return = 150
		}
	}
	bad = append(bad, stry(33, 34, true, 0, 400, 410), sread(false, 1000))
	res := linearizable(bad, SharedModel)
	require.Len(t, res, 1)
	require.Contains(t, res[0], "not linearizable")
}
