package fsm

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testdata/log-v1.txt is a log written by the version-1 codec, one entry a
// line with the results version 1 applied it to; testdata/snapshot-v2.bin
// is the snapshot version 2 saved after it. A replica of today must replay
// the old log to the same results and the same state, and restore the old
// snapshot to that state too.
func TestVersion1LogReplays(t *testing.T) {
	st, restored := replayOldLog(t, "testdata/log-v1.txt", 1, 6, "testdata/snapshot-v2.bin")
	require.Equal(t, saveBytes(t, st), saveBytes(t, restored), "the replayed log and the old snapshot agree")
	require.Zero(t, restored.LeaderMark())
	require.Equal(t, "v2", restored.Election("E").Value)
	require.False(t, restored.Lock("L").Held)
}

// testdata/log-v2-sessions.txt is a log written by the version-2 codec
// (every kind it had, its close-session without a floor among them), and
// testdata/snapshot-v3-sessions.bin the snapshot version 3 saved after it.
func TestVersion2SessionLogReplays(t *testing.T) {
	st, restored := replayOldLog(t, "testdata/log-v2-sessions.txt", 2, 12, "testdata/snapshot-v3-sessions.bin")
	require.Equal(t, saveBytes(t, st), saveBytes(t, restored), "the replayed log and the old snapshot agree")
	require.Equal(t, uint64(0xfeed), restored.GroupID())
	e := restored.Election("E")
	require.True(t, e.Led)
	require.Equal(t, "a2", e.Value)
	require.Len(t, restored.Sessions(), 3)

	// A session of the old log can be resumed: base 0 never refused it.
	a := uint64(2 << TokenShift)
	h := harnessFor(t, restored)
	info, ok := restored.Session(a)
	require.True(t, ok)
	r, _ := h.one(Command{Kind: KindResume, Session: a, Nonce: 11, Owner: 3, TTL: info.TTL})
	require.Equal(t, OK, r.Status)
}

// replayOldLog applies the log in file, whose entries are all of version
// v (n of them), checking each gives the results recorded with it, and
// restores the snapshot saved after it.
func replayOldLog(t *testing.T, file string, v byte, n uint64, snapshot string) (st, restored *State) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	st = New()
	sc := bufio.NewScanner(f)
	index := uint64(0)
	for sc.Scan() {
		entry, results, ok := strings.Cut(sc.Text(), " ")
		require.True(t, ok)
		data, err := hex.DecodeString(entry)
		require.NoError(t, err)
		cmds, err := DecodeBatch(data, nil)
		require.NoError(t, err)
		if v < 9 {
			require.Equal(t, v, data[0], "a version-%d entry", v)
		} else {
			// From version 9 a group writes its gate's version, and the
			// entry that raises it the version it raises it to.
			written, err := AppendEntry(nil, st.Gate(), 0, cmds)
			require.NoError(t, err)
			require.Equal(t, written[0], data[0], "entry %d is written at the group's gate", index+1)
		}
		index++
		rs, _ := st.Apply(index, cmds)
		require.Equal(t, results, hex.EncodeToString(AppendResults(nil, rs)), "entry %d applies as it did", index)
	}
	require.NoError(t, sc.Err())
	require.Equal(t, n, index)
	old, err := os.ReadFile(snapshot)
	require.NoError(t, err)
	restored, err = DecodeSnapshot(old)
	require.NoError(t, err)
	require.NoError(t, checkInvariants(restored, true))
	return st, restored
}

// testdata/log-v2.txt is a log written by the version-2 codec (locks with
// queues, try-acquires, an election, a revocation, an operator's end of a
// session, an expiry overruled), one entry a line with the results version
// 2 applied it to; testdata/snapshot-v3.bin is the snapshot (format
// version 3) the same code saved after it. Today's replica must replay the
// log to the same results and restore the old snapshot to the same state.
func TestVersion2LogReplaysAndVersion3SnapshotLoads(t *testing.T) {
	f, err := os.Open("testdata/log-v2.txt")
	require.NoError(t, err)
	defer f.Close()
	h := newHarness(t)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		entry, results, ok := strings.Cut(sc.Text(), " ")
		require.True(t, ok)
		data, err := hex.DecodeString(entry)
		require.NoError(t, err)
		require.Equal(t, byte(2), data[0], "a version-2 entry")
		cmds, err := DecodeBatch(data, nil)
		require.NoError(t, err)
		rs, _ := h.apply(cmds...)
		require.Equal(t, results, hex.EncodeToString(AppendResults(nil, rs)), "entry %d applies as it did", h.idx)
	}
	require.NoError(t, sc.Err())
	require.Equal(t, uint64(15), h.idx)

	old, err := os.ReadFile("testdata/snapshot-v3.bin")
	require.NoError(t, err)
	require.Equal(t, byte(3), old[4], "a snapshot of format version 3")
	restored, err := DecodeSnapshot(old)
	require.NoError(t, err)
	require.NoError(t, checkInvariants(restored, true))
	require.NoError(t, checkElectionInvariants(restored))
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, restored), "the replayed log and the old snapshot agree")
	require.Equal(t, viewOf(h.st), viewOf(restored))
	l := restored.Lock("L")
	require.True(t, l.Held)
	require.False(t, l.Shared)
	require.Len(t, l.Holders, 1)
	require.Equal(t, "a", restored.Election("E").Value)
	// The restored state goes on like the replayed one.
	h2 := harnessFor(t, restored)
	more := []Command{{Kind: KindAcquireShared, Session: l.Session, Seq: 100, Name: "M", Wait: true},
		{Kind: KindRevoke, Name: "L"}}
	r1, e1 := h.apply(more...)
	r2, e2 := h2.apply(more...)
	require.Equal(t, r1, r2)
	require.Equal(t, e1, e2)
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, h2.st))
}

// testdata/log-v3.txt and testdata/snapshot-v4.bin froze the formats of
// version 3 (every kind of version 3, from the determinism driver): the log
// must replay to the results recorded with it and to the state of the
// snapshot, which must restore to itself.
func TestVersion3LogReplays(t *testing.T) {
	checkFrozenLog(t, 3, 400, "testdata/log-v3.txt", "testdata/snapshot-v4.bin", KindExpireGrant)
}

// testdata/log-v4.txt and testdata/snapshot-v4-log-v4.bin froze the
// formats of version 4 (every kind, from the determinism driver, whose
// keep-alive batches version 4 added; the snapshot format did not change).
// Its revokes of a delayed session's lock free it at once, and its resumes
// carry no TTL: replayed today, they must still reach the frozen state.
func TestVersion4LogReplays(t *testing.T) {
	checkFrozenLog(t, 4, 400, "testdata/log-v4.txt", "testdata/snapshot-v4-log-v4.bin", KindKeepAliveBatch)
}

// testdata/log-v5.txt and testdata/snapshot-v4-log-v5.bin froze the
// formats of version 5 (every kind, from the determinism driver; version 5
// added the resume's TTL and the revoke's lock-delay, and the snapshot
// format did not change). They were written by writeFrozenLog as version
// 6's are now.
func TestVersion5LogReplays(t *testing.T) {
	const entries = 400
	const logFile, snapFile = "testdata/log-v5.txt", "testdata/snapshot-v4-log-v5.bin"
	checkFrozenLog(t, 5, entries, logFile, snapFile, KindKeepAliveBatch)
	// The frozen log holds what version 5 changed: resumes refused for
	// their TTL, and revokes that delayed a lock.
	var refused, delayedByRevoke int
	replayFrozen(t, logFile, func(cmds []Command, rs []Result, evs []Event) {
		for j, c := range cmds {
			if c.Kind == KindResume && rs[j].Status == Conflict {
				refused++
			}
		}
		for _, e := range evs {
			if e.Kind == EventDelayed && e.Reason == ReasonRevoked {
				delayedByRevoke++
			}
		}
	})
	require.Positive(t, refused, "a resume refused for its TTL")
	require.Positive(t, delayedByRevoke, "a revoke that delayed a lock")
}

// frozenAt is the time writeFrozenLog stamps its first entry with; each
// entry after is 10ms later.
const frozenAt = 1_780_000_000_000_000_000

// testdata/log-v6.txt and testdata/snapshot-v5-log-v6.bin froze the
// formats of version 6 (every kind, from the determinism driver; version 6
// added the entry's time and the session's name, and snapshot version 5
// the names and the times of grants and queued requests). They were
// written by writeFrozenLog as version 7's are now.
func TestVersion6LogReplays(t *testing.T) {
	const entries = 400
	const logFile, snapFile = "testdata/log-v6.txt", "testdata/snapshot-v5-log-v6.bin"
	checkFrozenLog(t, 6, entries, logFile, snapFile, KindKeepAliveBatch)
	// The frozen log holds what version 6 added: named sessions, an open
	// refused for its name, and every grant and queued request timed by
	// its entry.
	var named, badName, grants int
	var last uint64
	replayFrozen(t, logFile, func(cmds []Command, rs []Result, evs []Event) {
		require.Greater(t, cmds[0].At, last, "entries are stamped in order")
		last = cmds[0].At
		for j, c := range cmds {
			require.Equal(t, cmds[0].At, c.At, "one time per entry")
			if c.Kind == KindOpenSession && c.Name != "" && rs[j].Status == OK {
				named++
			}
			if c.Kind == KindOpenSession && rs[j].Status == Invalid && rs[j].Value == InvalidSessionName {
				badName++
			}
		}
		for _, e := range evs {
			if e.Kind == EventGranted || e.Kind == EventElected {
				grants++
			}
		}
	})
	require.Positive(t, named, "sessions opened with a name")
	require.Positive(t, badName, "an open refused for its name")
	require.Positive(t, grants)

	_, st := frozenSnapshot(t, snapFile)
	var names, timed, queued int
	for _, s := range st.Sessions() {
		if s.Name != "" {
			names++
		}
	}
	for l := range st.locks.all {
		for _, h := range l.info().Holders {
			require.NotEmpty(t, h.Name, "every session of the log is named")
			if h.GrantedAt >= frozenAt {
				timed++
			}
		}
		for _, w := range l.waiterList(MaxWaitersPerLock) {
			if w.QueuedAt >= frozenAt {
				queued++
			}
		}
	}
	require.Positive(t, names)
	require.Positive(t, timed, "grants with their times")
	require.Positive(t, queued, "queued requests with their times")
}

// testdata/log-v7.txt and testdata/snapshot-v6-log-v7.bin froze the
// formats of version 7 (every kind, from the determinism driver; version 7
// added the operation ID of Revoke and EndSession, and snapshot version 6
// the outcomes of the operations it remembers). They were written by
// writeFrozenLog as version 8's are now.
func TestVersion7LogReplays(t *testing.T) {
	const entries = 400
	const logFile, snapFile = "testdata/log-v7.txt", "testdata/snapshot-v6-log-v7.bin"
	checkFrozenLog(t, 7, entries, logFile, snapFile, KindKeepAliveBatch)
	// The frozen log holds what version 7 added: operator commands with
	// an ID, some retried, each retry answered as its first attempt was
	// and changing nothing; and some without an ID, as before.
	first := map[uint64]Result{}
	var withID, retried, withoutID int
	replayFrozen(t, logFile, func(cmds []Command, rs []Result, evs []Event) {
		for j, c := range cmds {
			if c.Kind != KindRevoke && c.Kind != KindEndSession {
				continue
			}
			if c.Op == 0 {
				withoutID++
				continue
			}
			r, seen := first[c.Op]
			if !seen {
				first[c.Op] = rs[j]
				withID++
				continue
			}
			retried++
			require.Equal(t, r, rs[j], "a retry of operation %d gets the first outcome", c.Op)
			if len(cmds) == 1 {
				require.Empty(t, evs, "a retry of operation %d changes nothing", c.Op)
			}
		}
	})
	require.Positive(t, withID)
	require.Positive(t, retried)
	require.Positive(t, withoutID)

	_, st := frozenSnapshot(t, snapFile)
	require.Positive(t, st.ops.len(), "the snapshot remembers operations")
}

// testdata/log-v8.txt and testdata/snapshot-v6-log-v8.bin froze the
// formats of version 8 (every kind, from the determinism driver; version 8
// added the keep flag of Resume, and changed no snapshot). They were
// written by writeFrozenLog as version 9's are now; version 9 writes
// exactly this log, and this snapshot, while its gate is the baseline.
func TestVersion8LogReplays(t *testing.T) {
	const entries = 400
	const logFile, snapFile = "testdata/log-v8.txt", "testdata/snapshot-v6-log-v8.bin"
	checkFrozenLog(t, 8, entries, logFile, snapFile, KindKeepAliveBatch)
	// At the baseline, version 9 writes the entries of version 8 byte for
	// byte (the log holds no raise of the gate: version 8 had none).
	requireWrittenAgain(t, frozenEntries(t, logFile), 8)
	// The frozen log holds what version 8 added: resumes that keep the
	// session's queued requests, each of which is granted later under its
	// own number; and resumes that withdraw them, as before.
	kept := map[[2]uint64]bool{}
	var keeps, withdraws, keptGranted int
	replayFrozen(t, logFile, func(cmds []Command, rs []Result, evs []Event) {
		for j, c := range cmds {
			if c.Kind == KindResume && rs[j].Status == OK {
				if c.Keep {
					keeps++
				} else {
					withdraws++
				}
			}
		}
		for _, e := range evs {
			switch e.Kind {
			case EventKeptQueued:
				kept[[2]uint64{e.Session, e.Seq}] = true
			case EventGranted, EventElected:
				if kept[[2]uint64{e.Session, e.Seq}] {
					keptGranted++
				}
			}
		}
	})
	require.Positive(t, keeps)
	require.Positive(t, withdraws)
	require.NotEmpty(t, kept, "queued requests kept by a resume")
	require.Positive(t, keptGranted, "a kept request granted later")
}

// testdata/log-v9.txt and testdata/snapshot-v7-log-v9.bin froze the
// formats of version 9 (every kind, from the determinism driver; version
// 9 added the gate, and snapshot version 7 keeps it). The log is written
// as a group writes it: at the baseline, version 8, until the gate is
// raised, in the first entry of version 9. They were written by
// writeFrozenLog as version 10's are now; version 10 writes exactly this
// log, and this snapshot, while its gate is 9.
func TestVersion9LogReplays(t *testing.T) {
	const entries = 400
	const logFile, snapFile = "testdata/log-v9.txt", "testdata/snapshot-v7-log-v9.bin"
	checkFrozenLog(t, 9, entries, logFile, snapFile, KindGate)
	// Below gate 10, version 10 writes every entry of version 9 (and 8)
	// byte for byte: opens without their parents.
	frozen := frozenEntries(t, logFile)
	requireWrittenAgain(t, frozen, 9)
	// The frozen log holds what version 9 added: the raise, in the first
	// entry of version 9 (the ones before it are version 8), a raise to
	// what the gate is already, which changes nothing, and one to a gate
	// the group may not write, refused.
	versions := entryVersions(frozen)
	first := slices.Index(versions, 9)
	require.Positive(t, first, "entries of version 8 before the raise")
	require.Equal(t, slices.Repeat([]byte{8}, first), versions[:first])
	require.Equal(t, slices.Repeat([]byte{9}, len(versions)-first), versions[first:])
	var raised, unchanged, refused int
	i := 0
	replayFrozen(t, logFile, func(cmds []Command, rs []Result, evs []Event) {
		for j, c := range cmds {
			if c.Kind != KindGate {
				continue
			}
			switch {
			case rs[j].Status == Invalid:
				refused++
			case len(evs) == 1 && evs[0].Kind == EventGateRaised:
				require.Equal(t, first, i, "the raise is the first entry of version 9")
				require.Equal(t, Gate{Codec: 9, Snapshot: 7}, evs[0].Gate)
				raised++
			default:
				require.Equal(t, OK, rs[j].Status)
				require.Empty(t, evs)
				unchanged++
			}
		}
		i++
	})
	require.Equal(t, []int{1, 1, 1}, []int{raised, unchanged, refused})

	golden, st := frozenSnapshot(t, snapFile)
	require.Equal(t, byte(7), golden[len(snapshotMagic)], "a snapshot of version 7")
	require.Equal(t, Gate{Codec: 9, Snapshot: 7}, st.Gate())
}

// testdata/log-v10.txt and testdata/snapshot-v8-log-v10.bin froze the
// formats of version 10 (every kind, from the determinism driver; version
// 10 added an open's parent, and snapshot version 8 keeps it with the
// session). The log is written as a group writes it: version 8 until the
// gate is raised to 9, 9 until it is raised to 10.
func TestVersion10LogReplays(t *testing.T) {
	const entries = 420
	const logFile, snapFile = "testdata/log-v10.txt", "testdata/snapshot-v8-log-v10.bin"
	checkFrozenLog(t, 10, entries, logFile, snapFile, KindGate)
	versions := entryVersions(frozenEntries(t, logFile))
	nine, ten := slices.Index(versions, 9), slices.Index(versions, 10)
	require.Positive(t, nine)
	require.Greater(t, ten, nine)
	require.Equal(t, slices.Repeat([]byte{9}, ten-nine), versions[nine:ten])
	require.Equal(t, slices.Repeat([]byte{10}, len(versions)-ten), versions[ten:])
	// What version 10 added: an open that names its parent, opened in
	// the first entries of version 10, keeps it in every view of it; the
	// opens of version 9 and older have none (unknown).
	var parents, without int
	replayFrozen(t, logFile, func(cmds []Command, rs []Result, _ []Event) {
		for j, c := range cmds {
			if c.Kind == KindOpenSession && rs[j].Status == OK {
				if c.Parent != 0 {
					parents++
				} else {
					without++
				}
			}
		}
	})
	require.Positive(t, parents)
	require.Positive(t, without)

	golden, st := frozenSnapshot(t, snapFile)
	require.Equal(t, byte(8), golden[len(snapshotMagic)], "a snapshot of version 8")
	require.Equal(t, Gate{Codec: 10, Snapshot: 8}, st.Gate())
	l := st.Lock("part")
	require.True(t, l.Held)
	require.Equal(t, uint64(frozenParent), l.Parent)
	require.Equal(t, uint64(frozenParent), l.Holders[0].Parent)
	info, ok := st.Session(l.Session)
	require.True(t, ok)
	require.Equal(t, uint64(frozenParent), info.Parent)
	require.NotEqual(t, l.Session, info.Parent, "a part's own ID is not its session's")
}

// testdata/log-v11.txt and testdata/snapshot-v9-log-v11.bin freeze
// today's formats (every kind, from the determinism driver; version 11
// added a resume's fence and the seal, and snapshot version 9 keeps a
// part's ownership epoch and the seal) so that the next version is tested against them as this one is
// against versions 1 to 10. The log is written as a group writes it:
// version 8 until the gate is raised to 9, and so on to 11.
// FENCELOCK_WRITE_GOLDEN=1 writes them afresh, for a new version only.
func TestVersion11LogReplays(t *testing.T) {
	const entries = 430
	const logFile, snapFile = "testdata/log-v11.txt", "testdata/snapshot-v9-log-v11.bin"
	if os.Getenv("FENCELOCK_WRITE_GOLDEN") != "" {
		writeFrozenLog(t, entries, logFile, snapFile)
	}
	checkFrozenLog(t, 11, entries, logFile, snapFile, maxKind)
	versions := entryVersions(frozenEntries(t, logFile))
	ten, eleven := slices.Index(versions, 10), slices.Index(versions, 11)
	require.Positive(t, ten)
	require.Greater(t, eleven, ten)
	require.Equal(t, slices.Repeat([]byte{11}, len(versions)-eleven), versions[eleven:])
	// What version 11 added: fenced resumes, one won and one lost of each
	// kind (a default part's compare-and-set, a part's epoch).
	var won, lost int
	replayFrozen(t, logFile, func(cmds []Command, rs []Result, _ []Event) {
		for j, c := range cmds {
			if c.Kind == KindResume && c.Fence {
				switch rs[j].Status {
				case OK:
					won++
				case NotApplied:
					lost++
				}
			}
		}
	})
	require.Equal(t, 2, won)
	require.Equal(t, 2, lost)
	// And the seal: it withdrew every queued request and candidacy (the
	// driver's, and a request and a candidacy queued for it), each
	// reported dropped; a second seal changed nothing; a retry of the
	// withdrawn request and a new one were answered Dropped; and nothing
	// was granted from the seal on, a release included.
	var sealed bool
	var seals, dropped, answered, grantsAfter int
	var withdrawn []uint64
	replayFrozen(t, logFile, func(cmds []Command, rs []Result, evs []Event) {
		for j, c := range cmds {
			if c.Kind == KindSeal {
				require.Equal(t, OK, rs[j].Status)
				withdrawn = append(withdrawn, rs[j].Value)
				seals++
				sealed = true
			}
			if sealed && (c.Kind == KindAcquire || c.Kind == KindCampaign) && rs[j].Status == Dropped {
				answered++
			}
		}
		for _, e := range evs {
			switch {
			case e.Kind == EventDropped:
				dropped++
			case sealed && (e.Kind == EventGranted || e.Kind == EventElected):
				grantsAfter++
			}
		}
	})
	require.Equal(t, 2, seals)
	require.Equal(t, []uint64{uint64(dropped), 0}, withdrawn, "the second seal withdrew nothing")
	require.GreaterOrEqual(t, dropped, 2)
	require.Equal(t, 2, answered)
	require.Zero(t, grantsAfter)

	golden, st := frozenSnapshot(t, snapFile)
	require.Equal(t, byte(9), golden[len(snapshotMagic)], "a snapshot of version 9")
	require.Equal(t, Gate{Codec: 11, Snapshot: 9}, st.Gate())
	l := st.Lock("fenced")
	require.True(t, l.Held)
	part, ok := st.Session(l.Session)
	require.True(t, ok)
	def, ok := st.Session(part.Parent)
	require.True(t, ok)
	require.Equal(t, uint64(2), part.Owner)
	require.NotZero(t, def.Base)
	require.Equal(t, def.Base, part.Epoch, "the part keeps the epoch of the adoption that moved it")
	require.True(t, st.Sealed(), "the snapshot keeps the seal")
	require.False(t, st.Lock("part").Held, "released after the seal, granted to nobody")
	require.Zero(t, st.Lock("part").Waiters)
}

// frozenParent is the parent of the part the frozen log of version 10
// opens: a session of another group, whose ID this one never issued.
const frozenParent = 77<<TokenShift + 3

// writeFrozenLog writes the frozen log of today's version, entries long,
// and the snapshot it replays to: hand-written entries for what the
// driver does not do, then the driver's. Sessions are named after their
// nonces, and entry i is stamped frozenAt + i·10ms.
func writeFrozenLog(t *testing.T, entries int, logFile, snapFile string) {
	d := newDriver(rand.New(rand.NewPCG(0x9014, 4)))
	st := New()
	var log strings.Builder
	// The driver takes locks; an election's kinds, by hand, first.
	hand := [][]Command{
		{{Kind: KindLeaderStart, Owner: 1, Term: 2, Nonce: 0xfeed}},
		{openCmd(901), openCmd(902)},
		{{Kind: KindCampaign, Session: 2 << TokenShift, Seq: 1, Floor: 1, Name: "e", Value: "a", Wait: true, MaxHold: 5e9}},
		{{Kind: KindCampaign, Session: 2<<TokenShift + 1, Seq: 1, Floor: 1, Name: "e", Value: "b", Wait: true}},
		{{Kind: KindProclaim, Session: 2 << TokenShift, Seq: 2, Floor: 1, Name: "e", Value: "a2", Token: 3 << TokenShift}},
		{{Kind: KindResign, Session: 2 << TokenShift, Seq: 3, Floor: 1, Name: "e", Token: 3 << TokenShift}},
		{{Kind: KindExpireGrant, Election: true, Name: "e", Token: 6 << TokenShift, Mark: 1}},
		{{Kind: KindUndelay, Name: "a", Token: 1, Mark: 1}},
		{{Kind: KindKeepAliveBatch, Owner: 1, Renew: []Renewal{{Session: 2 << TokenShift, Floor: 4}, {Session: 2<<TokenShift + 1, Floor: 2}, {Session: 3 << TokenShift, Floor: 1}}}},
	}
	var i int
	next := func(cmds []Command) Result {
		i++
		for j := range cmds {
			if cmds[j].Kind == KindOpenSession && cmds[j].Name == "" {
				cmds[j].Name = fmt.Sprintf("worker-%d@host", cmds[j].Nonce)
			}
		}
		data, err := AppendEntry(nil, st.Gate(), frozenAt+uint64(i)*1e7, cmds)
		require.NoError(t, err)
		cmds, err = DecodeBatch(data, nil)
		require.NoError(t, err)
		rs, evs := st.Apply(uint64(i), cmds)
		d.observe(cmds, rs, evs)
		log.WriteString(hex.EncodeToString(data) + " " + hex.EncodeToString(AppendResults(nil, rs)) + "\n")
		return rs[0]
	}
	for _, cmds := range hand {
		next(cmds)
	}
	// Version 5's changes: a revoke that delays a lock, a resume whose
	// TTL is not the session's.
	delayed := next([]Command{{Kind: KindOpenSession, Nonce: 903, TTL: 1e9, Owner: 1, Delay: 5e9}}).Value
	next([]Command{acqCmd(delayed, 1, "r", true)})
	next([]Command{{Kind: KindRevoke, Name: "r"}})
	next([]Command{{Kind: KindResume, Session: 2 << TokenShift, Nonce: 901, Owner: 2, Target: 7, TTL: 2e9}})
	// Version 6's: a name that is not UTF-8 is refused.
	next([]Command{{Kind: KindOpenSession, Nonce: 904, TTL: 1e9, Owner: 1, Name: "bad\xff"}})
	// Version 7's: a revoke by name with an operation ID, retried after
	// it granted the lock on (the retry ends nothing), and an operator's
	// end of a session, retried (OK again, not UnknownSession).
	x, y := next([]Command{openCmd(905)}).Value, next([]Command{openCmd(906)}).Value
	next([]Command{acqCmd(x, 1, "op", false), acqCmd(y, 1, "op", true)})
	for range 2 {
		next([]Command{{Kind: KindRevoke, Name: "op", Op: 0x39_0001}})
	}
	for range 2 {
		next([]Command{{Kind: KindEndSession, Session: x, Op: 0x39_0002}})
	}
	// Version 8's: a resume that keeps the session's queued request, which
	// is granted later under its own number.
	p, q := next([]Command{openCmd(907)}).Value, next([]Command{openCmd(908)}).Value
	held := next([]Command{acqCmd(p, 1, "keep", false)}).Value
	next([]Command{acqCmd(q, 1, "keep", true)})
	next([]Command{{Kind: KindResume, Session: q, Nonce: 908, Owner: 2, Target: 9, TTL: openCmd(0).TTL, Keep: true}})
	next([]Command{relCmd(p, 2, "keep", held)})
	next([]Command{acqCmd(p, 3, "keep", true)})
	next([]Command{{Kind: KindResume, Session: p, Nonce: 907, Owner: 3, Target: 10, TTL: openCmd(0).TTL}}) // withdraws it
	// Version 9's: the gate raised, in the first entry of version 9; a
	// raise to what it is already; one to a gate the group may not write
	// (a snapshot of version 6 cannot hold a raised log version).
	next([]Command{{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}}})
	next([]Command{{Kind: KindGate, Gate: Baseline}})
	next([]Command{{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 6}}})
	// Version 10's: an open at gate 9 drops its parent; the gate raised
	// to 10 (not to a log version 10 with snapshots of version 7, which
	// would lose the parents); a part opened with its parent, which waits
	// for a lock; and, last, one that holds a lock, for the snapshot.
	next([]Command{{Kind: KindOpenSession, Nonce: 909, TTL: 1e9, Owner: 1, Parent: frozenParent}})
	next([]Command{{Kind: KindGate, Gate: Gate{Codec: 10, Snapshot: 7}}})
	next([]Command{{Kind: KindGate, Gate: Gate{Codec: 10, Snapshot: 8}}})
	waiting := next([]Command{{Kind: KindOpenSession, Nonce: 910, TTL: 1e9, Owner: 2, Parent: frozenParent + 1}}).Value
	next([]Command{acqCmd(waiting, 1, "keep", true)})
	for i < entries-19 {
		// Kinds the codec has no encoding for are the driver's test of
		// Apply, not entries a log can hold.
		cmds := slices.DeleteFunc(d.entry(), func(c Command) bool { return c.Kind == 0 || c.Kind > maxKind })
		if len(cmds) > 0 {
			next(cmds)
		}
	}
	// Version 11's: the gate raised to 11 (not to a log version 11 with
	// snapshots of version 8, which would lose the parts' epochs); a
	// session and its part, which holds a lock; two fenced adoptions of
	// the session on the same base, the first winning it; the winner's
	// resume of the part under its epoch, and a second on the same epoch,
	// refused.
	next([]Command{{Kind: KindGate, Gate: Gate{Codec: 11, Snapshot: 8}}})
	next([]Command{{Kind: KindGate, Gate: Gate{Codec: 11, Snapshot: 9}}})
	def := next([]Command{openCmd(912)}).Value
	fenced := next([]Command{{Kind: KindOpenSession, Nonce: 913, TTL: 1e9, Owner: 1, Parent: def}}).Value
	next([]Command{acqCmd(fenced, 1, "fenced", false)})
	epoch := next([]Command{{Kind: KindResume, Session: def, Nonce: 912, Owner: 2, Target: 11, TTL: 1e9, Keep: true, Fence: true}}).Value
	next([]Command{{Kind: KindResume, Session: def, Nonce: 912, Owner: 3, Target: 12, TTL: 1e9, Keep: true, Fence: true}})
	next([]Command{{Kind: KindResume, Session: fenced, Nonce: 913, Owner: 2, Target: 13, TTL: 1e9, Keep: true, Fence: true, Epoch: epoch, Parent: def}})
	next([]Command{{Kind: KindResume, Session: fenced, Nonce: 913, Owner: 3, Target: 14, TTL: 1e9, Keep: true, Fence: true, Epoch: epoch, Parent: def}})
	part := next([]Command{{Kind: KindOpenSession, Nonce: 911, TTL: 1e9, Owner: 2, Parent: frozenParent}}).Value
	partToken := next([]Command{acqCmd(part, 1, "part", false)}).Value
	// And the seal, last (a sealed group grants nothing more): a request
	// and a candidacy queued, withdrawn by it; a second seal; a retry of
	// the withdrawn request and a new one, both answered Dropped; a
	// release, which grants nothing.
	late := next([]Command{openCmd(914)}).Value
	next([]Command{acqCmd(late, 1, "part", true)})
	next([]Command{{Kind: KindCampaign, Session: part, Seq: 2, Name: "sealed", Value: "p", Wait: true}})
	next([]Command{{Kind: KindCampaign, Session: late, Seq: 2, Name: "sealed", Value: "l", Wait: true}})
	next([]Command{{Kind: KindSeal}})
	next([]Command{{Kind: KindSeal}})
	next([]Command{acqCmd(late, 1, "part", true), acqCmd(late, 3, "fresh", true)})
	next([]Command{relCmd(part, 3, "part", partToken)})
	require.NoError(t, os.WriteFile(logFile, []byte(log.String()), 0o644))
	require.NoError(t, os.WriteFile(snapFile, saveBytes(t, st), 0o644))
}

// replayFrozen applies the frozen log in file to a new state, calling
// each with every entry's commands, results and events.
func replayFrozen(t *testing.T, file string, each func([]Command, []Result, []Event)) {
	st := New()
	for i, e := range frozenEntries(t, file) {
		rs, evs := st.Apply(uint64(i+1), e.cmds)
		each(e.cmds, rs, evs)
	}
}

// checkFrozenLog replays the frozen log of version v to its frozen
// snapshot, restores that, and requires the log to hold every kind up to
// last.
func checkFrozenLog(t *testing.T, v byte, entries uint64, logFile, snapFile string, last Kind) {
	st, restored := replayOldLog(t, logFile, v, entries, snapFile)
	golden, _ := frozenSnapshot(t, snapFile)
	if int(golden[len(snapshotMagic)]) == st.Gate().Snapshot {
		require.Equal(t, golden, saveBytes(t, st), "the log replays to the frozen snapshot")
		require.Equal(t, golden, saveBytes(t, restored), "the frozen snapshot restores to itself")
	} else {
		// An older format is saved as today's at the baseline: the
		// replayed log and the restored snapshot must agree in it.
		require.Equal(t, saveBytes(t, restored), saveBytes(t, st), "the log replays to the frozen snapshot's state")
		require.Equal(t, viewOf(restored), viewOf(st))
	}

	seen := map[Kind]bool{}
	for _, e := range frozenEntries(t, logFile) {
		for _, c := range e.cmds {
			seen[c.Kind] = true
		}
	}
	for k := KindOpenSession; k <= last; k++ {
		require.True(t, seen[k], "the frozen log holds a %v", k)
	}
}

// frozenEntry is one entry of a frozen log.
type frozenEntry struct {
	data []byte    // as the log holds it
	cmds []Command // decoded by today's codec
}

// frozenEntries reads the frozen log in file: each line's entry (the hex
// before its results), decoded.
func frozenEntries(t *testing.T, file string) []frozenEntry {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var out []frozenEntry
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		entry, _, _ := strings.Cut(line, " ")
		b, err := hex.DecodeString(entry)
		require.NoError(t, err)
		cmds, err := DecodeBatch(b, nil)
		require.NoError(t, err)
		out = append(out, frozenEntry{data: b, cmds: cmds})
	}
	return out
}

// entryVersions is the log version each entry was written in, its first
// byte.
func entryVersions(entries []frozenEntry) []byte {
	versions := make([]byte, len(entries))
	for i, e := range entries {
		versions[i] = e.data[0]
	}
	return versions
}

// requireWrittenAgain requires today's codec, at the gate the log has
// raised to by each entry (the baseline before any raise), to write every
// entry byte for byte as version v wrote it.
func requireWrittenAgain(t *testing.T, entries []frozenEntry, v int) {
	t.Helper()
	gate := Baseline
	for _, e := range entries {
		again, err := AppendEntry(nil, gate, e.cmds[0].At, e.cmds)
		require.NoError(t, err)
		require.Equal(t, e.data, again, "written at gate %v as version %d wrote it", gate, v)
		for _, c := range e.cmds {
			if c.Kind == KindGate && c.Gate.Valid() {
				gate = gate.Max(c.Gate)
			}
		}
	}
}

// frozenSnapshot reads the frozen snapshot in file and decodes it.
func frozenSnapshot(t *testing.T, file string) (golden []byte, st *State) {
	t.Helper()
	golden, err := os.ReadFile(file)
	require.NoError(t, err)
	st, err = DecodeSnapshot(golden)
	require.NoError(t, err)
	return golden, st
}
