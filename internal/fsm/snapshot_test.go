package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// buildRich returns a harness whose state has something of everything:
// sessions with replies and floors, held locks, queues (one with a waiter of
// the holder's own session), and a cancel's reply.
func buildRich(tb testing.TB) *harness {
	h := newHarness(tb)
	a, b, c, d := h.open(11), h.open(12), h.open(13), h.open(14)
	h.one(Command{Kind: KindOpenSession, Nonce: 15, TTL: 3, Owner: 7})
	h.apply(acqCmd(a, 1, "alpha", false), acqCmd(b, 1, "alpha", true), acqCmd(c, 1, "alpha", true))
	h.apply(acqCmd(b, 2, "beta", false), acqCmd(a, 2, "beta", true), acqCmd(d, 1, "beta", false))
	h.apply(acqCmd(c, 2, "gamma/ü", false), acqCmd(c, 3, "gamma/ü", true))
	h.apply(relCmd(d, 2, "nope", 5), keepAliveCmd(d, 2))
	h.one(cancelCmd(a, 7))
	h.one(keepAliveCmd(b, 0))
	h.one(acqCmd(d, 5, "delta", false))
	r, _ := h.one(acqCmd(d, 6, "eps", false))
	h.one(relCmd(d, 7, "eps", r.Value))
	// Shared holders (one session twice) with an exclusive and a shared
	// request queued behind them, and a full semaphore with a waiter.
	h.apply(Command{Kind: KindAcquireShared, Session: a, Seq: 8, Name: "rw"},
		Command{Kind: KindAcquireShared, Session: b, Seq: 8, Name: "rw"},
		Command{Kind: KindAcquireShared, Session: b, Seq: 9, Name: "rw"},
		Command{Kind: KindAcquire, Session: c, Seq: 8, Name: "rw", Wait: true},
		Command{Kind: KindAcquireShared, Session: d, Seq: 8, Name: "rw", Wait: true})
	h.apply(Command{Kind: KindAcquireShared, Session: c, Seq: 9, Name: "sem", Permits: 2},
		Command{Kind: KindAcquireShared, Session: d, Seq: 9, Name: "sem", Permits: 2},
		Command{Kind: KindAcquireShared, Session: a, Seq: 9, Name: "sem", Permits: 2, Wait: true})
	return h
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(tb testing.TB) *State
	}{
		{"empty", func(testing.TB) *State { return New() }},
		{"rich", func(tb testing.TB) *State { return buildRich(tb).st }},
		{"after ending sessions", func(tb testing.TB) *State {
			h := buildRich(tb)
			h.one(closeCmd(h.st.Sessions()[0].ID))
			h.one(expireCmd(h.st.Sessions()[0].ID, ^uint64(0)))
			return h.st
		}},
		{"random", func(tb testing.TB) *State {
			h := newHarness(tb)
			newDriver(rand.New(rand.NewPCG(7, 8))).drive(h, 400)
			return h.st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.build(t)
			got := roundTrip(t, st)
			v := viewOf(got)
			require.Equal(t, v.Sessions, v.ByID)
		})
	}
}

func TestSnapshotDeterministic(t *testing.T) {
	st := buildRich(t).st
	first := saveBytes(t, st)
	for range 20 {
		require.Equal(t, first, saveBytes(t, st), "map order must not leak into the snapshot")
	}

	// The same state reached by commuting commands in different orders:
	// requests of different sessions on different locks that grant nothing
	// (queue, try-acquire on a held lock, failed release, cancel of nothing),
	// and keep-alives, all in one entry.
	build := func(order func([]Command)) []byte {
		h := newHarness(t)
		var ss []uint64
		for n := range uint64(8) {
			ss = append(ss, h.open(n+1))
		}
		var setup []Command
		for i, s := range ss {
			setup = append(setup, acqCmd(s, 1, string(rune('a'+i)), false))
		}
		h.apply(setup...)
		var cmds []Command
		for i, s := range ss {
			other := string(rune('a' + (i+1)%len(ss)))
			seq := uint64(10)
			for j := range 5 {
				seq++
				switch j % 5 {
				case 0:
					cmds = append(cmds, acqCmd(s, seq, other, true))
				case 1:
					cmds = append(cmds, acqCmd(s, seq, other, false))
				case 2:
					cmds = append(cmds, relCmd(s, seq, "none", 3))
				case 3:
					cmds = append(cmds, cancelCmd(s, 1000+seq))
				case 4:
					cmds = append(cmds, keepAliveCmd(s, 0))
				}
			}
		}
		order(cmds)
		h.apply(cmds...)
		return saveBytes(t, h.st)
	}
	want := build(func([]Command) {})
	require.Equal(t, want, build(slices.Reverse[[]Command]))
	for seed := range uint64(5) {
		rng := rand.New(rand.NewPCG(seed, 99))
		require.Equal(t, want, build(func(c []Command) {
			rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
		}))
	}
}

func TestRestoredStateAppliesAlike(t *testing.T) {
	h := buildRich(t)
	restored := harnessFor(t, roundTrip(t, h.st))
	ids := []uint64{}
	for _, s := range h.st.Sessions() {
		ids = append(ids, s.ID)
	}
	names := []string{"alpha", "beta", "gamma/ü", "delta", "new"}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		s := ids[rng.IntN(len(ids))]
		name := names[rng.IntN(len(names))]
		seq := uint64(100 + i)
		var c Command
		switch rng.IntN(5) {
		case 0, 1:
			c = acqCmd(s, seq, name, rng.IntN(2) == 0)
		case 2:
			c = relCmd(s, seq, name, h.st.Lock(name).Token)
		case 3:
			c = cancelCmd(s, uint64(rng.IntN(int(seq))))
		case 4:
			c = keepAliveCmd(s, 0)
		}
		r1, e1 := h.apply(c)
		r2, e2 := restored.apply(c)
		require.Equal(t, r1, r2)
		require.Equal(t, e1, e2)
	}
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, restored.st))
	require.Equal(t, viewOf(h.st), viewOf(restored.st))
}

func TestRestoreTruncated(t *testing.T) {
	data := saveBytes(t, buildRich(t).st)
	for i := range len(data) {
		_, err := DecodeSnapshot(data[:i])
		require.ErrorIs(t, err, ErrCorrupt, "truncated to %d bytes", i)
		_, err = Restore(bytes.NewReader(data[:i]))
		require.ErrorIs(t, err, ErrCorrupt, "truncated to %d bytes", i)
	}
}

func TestRestoreFlippedBits(t *testing.T) {
	raised := buildRich(t)
	raised.apply(Command{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}})
	for _, st := range []*State{buildRich(t).st, raised.st} {
		data := saveBytes(t, st)
		// A flip in the versions (the snapshot's, the gate's) may make one
		// this build does not read: too new, rather than corrupt.
		versions := map[int]bool{len(snapshotMagic): true}
		if st.Gate() != Baseline {
			at := len(snapshotMagic)
			for range 7 { // version index lastToken lastSession grants leaderMark groupID
				_, n := binary.Uvarint(data[at:])
				at += n
			}
			versions[at], versions[at+1] = true, true
		}
		for i := range data {
			for bit := range 8 {
				bad := slices.Clone(data)
				bad[i] ^= 1 << bit
				_, err := DecodeSnapshot(bad)
				if versions[i] && errors.Is(err, ErrVersionTooNew) {
					continue
				}
				require.ErrorIs(t, err, ErrCorrupt, "byte %d bit %d", i, bit)
			}
		}
	}
}

// snapImage is a snapshot written by hand, to forge ones that carry a valid
// checksum but inconsistent content.
type snapImage struct {
	magic                         string
	version                       uint64
	index, lastToken, lastSession uint64
	grants                        uint64    // version 2
	leaderMark, groupID           uint64    // version 3
	gate                          [2]uint64 // version 7: codec, snapshot
	sessions                      []snapSession
	sessionCount                  *uint64 // overrides len(sessions)
	locks                         []snapLock
	lockCount                     *uint64     // overrides len(locks)
	omitLocks                     bool        // ends the body after the sessions
	elections                     []snapLock  // version 2; see election_test.go
	omitElections                 bool        // ends a version 2 body after the locks
	ops                           []snapReply // version 6: remembered operations (seq is the op ID), oldest first
	opCount                       *uint64     // overrides len(ops)
	table                         []byte      // version 7: the group table's bytes; nil: none, never set
	trailing                      []byte
}

type snapSession struct {
	id, nonce, ttl, owner, keepAlive, floor uint64
	base, resumed, delay                    uint64 // version 4
	name                                    string // version 5
	parent                                  uint64 // version 8
	replies                                 []snapReply
}

type snapReply struct {
	seq    uint64
	status byte
	value  uint64
}

type snapLock struct {
	name               string
	holder, seq, token uint64
	more               [][3]uint64 // version 4: further holders (session seq token)
	permits            uint64      // version 4
	shared             bool        // version 4
	maxHold            uint64      // version 4: the (first) holder's
	delay, delayToken  uint64      // version 4
	free               bool        // version 4: no holders (a delayed lock)
	queue              [][2]uint64
	queueShared        []bool   // version 4: per queue entry; nil: all exclusive
	at                 uint64   // version 5: the (first) holder's grant time
	queueAt            []uint64 // version 5: per queue entry; nil: all 0
	value              string   // elections: the leader's
	values             []string // elections: the candidates', one per queue entry
}

func (im snapImage) body() []byte {
	u := binary.AppendUvarint
	b := []byte(im.magic)
	b = u(u(u(u(b, im.version), im.index), im.lastToken), im.lastSession)
	if im.version >= 2 {
		b = u(b, im.grants)
	}
	if im.version >= 3 {
		b = u(u(b, im.leaderMark), im.groupID)
	}
	if im.version >= 7 {
		b = u(u(b, im.gate[0]), im.gate[1])
	}
	n := uint64(len(im.sessions))
	if im.sessionCount != nil {
		n = *im.sessionCount
	}
	b = u(b, n)
	for _, s := range im.sessions {
		b = u(u(u(u(u(u(b, s.id), s.nonce), s.ttl), s.owner), s.keepAlive), s.floor)
		if im.version >= 4 {
			b = u(u(u(b, s.base), s.resumed), s.delay)
		}
		if im.version >= 5 {
			b = appendString(b, s.name)
		}
		if im.version >= 8 {
			b = u(b, s.parent)
		}
		b = u(b, uint64(len(s.replies)))
		for _, r := range s.replies {
			b = u(append(u(b, r.seq), r.status), r.value)
		}
	}
	if !im.omitLocks {
		n = uint64(len(im.locks))
		if im.lockCount != nil {
			n = *im.lockCount
		}
		b = u(b, n)
		for _, l := range im.locks {
			b = appendString(b, l.name)
			if im.version >= 4 {
				b = u(append(u(b, l.permits), boolByte(l.shared)), l.delay)
				if l.delay != 0 {
					b = u(b, l.delayToken)
				}
				n := uint64(1 + len(l.more))
				if l.free {
					n = 0
				}
				b = u(b, n)
			}
			if !l.free {
				b = u(u(u(b, l.holder), l.seq), l.token)
			}
			if im.version >= 4 && !l.free {
				b = u(b, l.maxHold)
				if im.version >= 5 {
					b = u(b, l.at)
				}
				for _, h := range l.more {
					b = u(u(u(u(b, h[0]), h[1]), h[2]), 0)
					if im.version >= 5 {
						b = u(b, 0)
					}
				}
			}
			b = u(b, uint64(len(l.queue)))
			for i, w := range l.queue {
				b = u(u(b, w[0]), w[1])
				if im.version >= 4 {
					b = append(b, boolByte(l.queueShared != nil && l.queueShared[i]), 0)
				}
				if im.version >= 5 {
					b = u(b, l.queueAtOf(i))
				}
			}
		}
		if im.version >= 2 && !im.omitElections {
			b = appendElections(b, im.elections, im.version)
			if im.version >= 6 {
				n = uint64(len(im.ops))
				if im.opCount != nil {
					n = *im.opCount
				}
				b = u(b, n)
				for _, r := range im.ops {
					b = u(append(u(b, r.seq), r.status), r.value)
				}
			}
			if im.version >= 7 {
				if im.table == nil {
					b = append(b, 0, 0) // not set, no groups
				}
				b = append(b, im.table...)
			}
		}
	}
	return append(b, im.trailing...)
}

// queueAtOf is the time queue entry i was queued at.
func (l snapLock) queueAtOf(i int) uint64 {
	if i >= len(l.queueAt) {
		return 0
	}
	return l.queueAt[i]
}

func (im snapImage) bytes() []byte { return withCRC(im.body()) }

func withCRC(body []byte) []byte {
	return binary.BigEndian.AppendUint32(slices.Clip(body), crc32.ChecksumIEEE(body))
}

const (
	imgA = 1 << TokenShift
	imgB = 1<<TokenShift + 1
)

// validImage is a consistent snapshot in canonical order.
func validImage() snapImage {
	return snapImage{
		magic: "FLSN", version: 7, index: 100, lastToken: 100<<TokenShift + 5, lastSession: 3 << TokenShift, grants: 9,
		leaderMark: 95, groupID: 0xfeed, gate: [2]uint64{9, 7},
		sessions: []snapSession{
			{id: imgA, nonce: 11, ttl: 1e9, owner: 1, keepAlive: 90, floor: 2, name: "reindex@worker-3", replies: []snapReply{
				{seq: 2, status: byte(Granted), value: 100 << TokenShift}, {seq: 3, status: byte(Queued)}}},
			{id: imgB, nonce: 12, ttl: 2e9, owner: 2, keepAlive: 100, resumed: 77, replies: []snapReply{
				{seq: 1, status: byte(Queued)}, {seq: 9, status: byte(Cancelled)}}},
		},
		locks: []snapLock{
			{name: "alpha", holder: imgA, seq: 2, token: 100 << TokenShift, queue: [][2]uint64{{imgB, 1}, {imgA, 3}},
				at: 1_700_000_000_000_000_000, queueAt: []uint64{1_700_000_001_000_000_000, 0}},
			{name: "beta", holder: imgB, seq: 4, token: 100<<TokenShift + 5},
		},
		elections: []snapLock{
			{name: "alpha", holder: imgB, seq: 5, token: 100<<TokenShift + 3, value: "b:7001",
				queue: [][2]uint64{{imgA, 6}}, values: []string{"a:7001"}},
		},
		ops: []snapReply{{seq: 1 << 63, status: byte(OK)}, {seq: 7, status: byte(NotHeld)}, {seq: 3, status: byte(UnknownSession)}},
		// set; one group "billing", shard 0x1234, created at 40, voters
		// 1,2,6, removed 3, bootstrapped by 1,2,3.
		table: []byte{1, 1, 7, 'b', 'i', 'l', 'l', 'i', 'n', 'g', 0xb4, 0x24, 40, 3, 1, 2, 6, 1, 3,
			3, 1, 3, 'a', ':', '1', 2, 3, 'b', ':', '2', 3, 3, 'c', ':', '3'},
	}
}

func TestRestoreHandWrittenSnapshot(t *testing.T) {
	data := validImage().bytes()
	st, err := DecodeSnapshot(data)
	require.NoError(t, err)
	require.NoError(t, checkInvariants(st, true))
	require.Equal(t, data, saveBytes(t, st), "Save writes exactly the documented format")
	require.Equal(t, LockInfo{Name: "alpha", Held: true, Token: 100 << TokenShift, Session: imgA, Seq: 2, Waiters: 2,
		SessionName: "reindex@worker-3", GrantedAt: 1_700_000_000_000_000_000,
		Holders: []Holder{{Session: imgA, Seq: 2, Token: 100 << TokenShift, Owner: 1, Name: "reindex@worker-3",
			GrantedAt: 1_700_000_000_000_000_000}}}, st.Lock("alpha"))
	require.Equal(t, []Waiter{
		{Session: imgB, Seq: 1, Owner: 2, Place: 1, QueuedAt: 1_700_000_001_000_000_000},
		{Session: imgA, Seq: 3, Owner: 1, Place: 2, Name: "reindex@worker-3"},
	}, st.Waiters("alpha", 10))
	require.Equal(t, []SessionInfo{
		{ID: imgA, Name: "reindex@worker-3", TTL: 1e9, Owner: 1, KeepAlive: 90, Held: 1, Waiting: 1},
		{ID: imgB, TTL: 2e9, Owner: 2, KeepAlive: 100, Held: 1, Waiting: 1},
	}, st.Sessions())
	require.True(t, st.Queued(imgB, 1))
	require.Equal(t, uint64(100), st.Index())
	require.Equal(t, uint64(100<<TokenShift+5), st.LastToken())

	// It behaves: the dedup replies and the queue survived.
	h := harnessFor(t, st)
	r, _ := h.one(acqCmd(imgB, 9, "x", true))
	require.Equal(t, Result{Status: Cancelled}, r)
	r, evs := h.one(relCmd(imgA, 5, "alpha", 100<<TokenShift))
	require.Equal(t, OK, r.Status)
	require.Equal(t, grantedEv(imgB, 1, "alpha", 102<<TokenShift), evs[1])
	r, _ = h.one(openCmd(99))
	require.Equal(t, uint64(103<<TokenShift), r.Value)
}

func TestRestoreRejectsInconsistentSnapshots(t *testing.T) {
	u64 := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name   string
		mutate func(im *snapImage)
	}{
		{"bad magic", func(im *snapImage) { im.magic = "XLSN" }},
		{"version 0", func(im *snapImage) { im.version = 0 }},
		{"operation 0", func(im *snapImage) { im.ops[1].seq = 0 }},
		{"an operation twice", func(im *snapImage) { im.ops[2].seq = im.ops[0].seq }},
		{"operation status 0", func(im *snapImage) { im.ops[0].status = 0 }},
		{"operation status unknown", func(im *snapImage) { im.ops[0].status = byte(Dropped) + 1 }},
		{"operation status refused", func(im *snapImage) { im.ops[0].status = byte(Refused) }},
		{"operation count beyond the data", func(im *snapImage) { im.opCount = u64(4) }},
		{"more operations than OpMemory", func(im *snapImage) {
			im.ops = make([]snapReply, OpMemory+1)
			for i := range im.ops {
				im.ops[i] = snapReply{seq: uint64(i + 1), status: byte(OK)}
			}
		}},
		{"session name too long", func(im *snapImage) { im.sessions[1].name = strings.Repeat("n", MaxSessionNameLen+1) }},
		{"session name not UTF-8", func(im *snapImage) { im.sessions[1].name = "w\xff" }},
		{"NUL in a session name", func(im *snapImage) { im.sessions[0].name = "a\x00b" }},
		{"base above the floor", func(im *snapImage) { im.sessions[0].base = 3 }},
		{"leader mark beyond index", func(im *snapImage) { im.leaderMark = im.index + 1 }},
		{"trailing bytes", func(im *snapImage) { im.trailing = []byte{0} }},
		{"no lock section", func(im *snapImage) { im.omitLocks = true }},
		{"session count beyond the data", func(im *snapImage) { im.sessionCount = u64(1 << 40) }},
		{"one session missing", func(im *snapImage) { im.sessionCount = u64(3) }},
		{"lock count beyond the data", func(im *snapImage) { im.lockCount = u64(1000) }},
		{"session id 0", func(im *snapImage) { im.sessions[0].id = 0 }},
		{"session id beyond the last", func(im *snapImage) { im.sessions[1].id = im.lastSession + 1 }},
		{"duplicate session id", func(im *snapImage) { im.sessions[1].id = imgA }},
		{"nonce 0", func(im *snapImage) { im.sessions[0].nonce = 0 }},
		{"duplicate nonce", func(im *snapImage) { im.sessions[1].nonce = 11 }},
		{"ttl 0", func(im *snapImage) { im.sessions[1].ttl = 0 }},
		{"keep-alive beyond the index", func(im *snapImage) { im.sessions[0].keepAlive = 101 }},
		{"reply below the floor", func(im *snapImage) { im.sessions[0].replies[0].seq = 1 }},
		{"reply status 0", func(im *snapImage) { im.sessions[0].replies[1].status = 0 }},
		{"reply status unknown", func(im *snapImage) { im.sessions[0].replies[1].status = byte(Conflict) + 1 }},
		{"duplicate reply", func(im *snapImage) { im.sessions[1].replies[1].seq = 1 }},
		{"lock held by an unknown session", func(im *snapImage) { im.locks[1].holder = 3 << TokenShift }},
		{"lock held by nobody", func(im *snapImage) { im.locks[0].holder = 0 }},
		{"waiter of an unknown session", func(im *snapImage) { im.locks[0].queue[0][0] = 42 }},
		{"empty lock name", func(im *snapImage) { im.locks[0].name = "" }},
		{"NUL in a lock name", func(im *snapImage) { im.locks[0].name = "al\x00pha" }},
		{"invalid UTF-8 lock name", func(im *snapImage) { im.locks[0].name = "\xffalpha" }},
		{"lock name too long", func(im *snapImage) { im.locks[0].name = strings.Repeat("a", MaxNameLen+1) }},
		{"duplicate lock name", func(im *snapImage) { im.locks[1].name = "alpha" }},
		{"token 0", func(im *snapImage) { im.locks[0].token = 0 }},
		{"token beyond the last", func(im *snapImage) { im.locks[1].token = im.lastToken + 1 }},
		{"holder's request also waits", func(im *snapImage) { im.locks[0].queue[1][1] = 2 }},
		{"request waits twice", func(im *snapImage) { im.locks[0].queue = append(im.locks[0].queue, [2]uint64{imgB, 1}) }},
		{"request waits on two locks", func(im *snapImage) { im.locks[1].queue = [][2]uint64{{imgA, 3}} }},
		{"request holds two locks", func(im *snapImage) { im.locks[1].holder, im.locks[1].seq = imgA, 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im := validImage()
			im.sessions = slices.Clone(im.sessions)
			for i := range im.sessions {
				im.sessions[i].replies = slices.Clone(im.sessions[i].replies)
			}
			im.locks = slices.Clone(im.locks)
			for i := range im.locks {
				im.locks[i].queue = slices.Clone(im.locks[i].queue)
			}
			tc.mutate(&im)
			requireCorrupt(t, im.bytes())
		})
	}

	for _, data := range [][]byte{nil, []byte("FLSN"), []byte("FLSN\x00\x00\x00"), withCRC([]byte("FLS"))} {
		_, err := DecodeSnapshot(data)
		require.ErrorIs(t, err, ErrCorrupt, "%q", data)
	}
}

var errBoom = errors.New("boom")

type failingReader struct{ data []byte }

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, errBoom
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestRestoreReaderError(t *testing.T) {
	data := saveBytes(t, buildRich(t).st)
	st, err := Restore(&failingReader{data: data[:10]})
	require.ErrorIs(t, err, errBoom)
	require.NotErrorIs(t, err, ErrCorrupt)
	require.Nil(t, st)
}

type failingWriter struct{ room int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.room {
		n := w.room
		w.room = 0
		return n, errBoom
	}
	w.room -= len(p)
	return len(p), nil
}

func TestSaveWriterError(t *testing.T) {
	small := buildRich(t).st
	// A state whose snapshot takes several chunks.
	h := newHarness(t)
	rs, _ := h.apply(openCmds(3000)...)
	var cmds []Command
	for i, r := range rs {
		cmds = append(cmds, acqCmd(r.Value, 1, strings.Repeat("n", 20)+string(rune('a'+i%26))+string(rune(0x100+i)), false))
	}
	h.apply(cmds...)
	large := h.st

	for _, st := range []*State{small, large} {
		data := saveBytes(t, st)
		for _, room := range []int{0, 1, 100, len(data) / 2, len(data) - 4, len(data) - 1} {
			require.ErrorIs(t, st.Save(&failingWriter{room: room}), errBoom, "room %d of %d", room, len(data))
		}
		require.NoError(t, st.Save(&failingWriter{room: len(data)}))
	}
	require.Greater(t, len(saveBytes(t, large)), 64<<10)
	roundTrip(t, large)
}
