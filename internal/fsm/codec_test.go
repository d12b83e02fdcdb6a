package fsm

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// everyKind has one command of each kind with every field it uses set to a
// distinct value, including extremes.
func everyKind() []Command {
	return []Command{
		{Kind: KindOpenSession, Nonce: 1, TTL: math.MaxUint64, Owner: 3},
		{Kind: KindOpenSession, Nonce: math.MaxUint64, TTL: 1, Owner: 0},
		{Kind: KindKeepAlive, Session: 1 << 16, Floor: 77},
		{Kind: KindCloseSession, Session: math.MaxUint64},
		{Kind: KindCloseSession, Session: 3, Floor: math.MaxUint64},
		{Kind: KindResume, Session: 4, Nonce: math.MaxUint64, Owner: 2, Target: math.MaxUint64},
		{Kind: KindResume, Session: 4, Nonce: 1, Owner: 2, Target: 3, TTL: math.MaxUint64},
		{Kind: KindAcquire, Session: 5, Seq: 6, Floor: 7, Wait: true, Name: "lock/ü/🔒"},
		{Kind: KindAcquire, Session: 5, Seq: math.MaxUint64, Floor: 0, Wait: false, Name: strings.Repeat("x", MaxNameLen)},
		{Kind: KindAcquire, Session: 5, Seq: 8, Name: ""}, // invalid for Apply, fine for the codec
		{Kind: KindRelease, Session: 9, Seq: 10, Floor: 11, Token: 12 << TokenShift, Name: "r"},
		{Kind: KindCancel, Session: 13, Target: 14, Floor: 15},
		{Kind: KindCancel, Session: 13, Target: 14, Floor: 15, Name: "lock/c"},
		{Kind: KindCancel, Session: 13, Target: 14, Floor: 15, Election: true, Name: "election/c"},
		{Kind: KindExpire, Session: 16, Target: 17},
		{Kind: KindExpire, Session: 16, Target: 17, Mark: math.MaxUint64},
		{Kind: KindLeaderStart, Owner: 3, Term: math.MaxUint64, Nonce: math.MaxUint64},
		{Kind: KindRevoke, Token: 7, Name: "lock/r"},
		{Kind: KindRevoke, Election: true, Name: "election/r"},
		{Kind: KindEndSession, Session: math.MaxUint64},
		{Kind: KindRevoke, Token: 8, Name: "lock/r", Op: math.MaxUint64},
		{Kind: KindRevoke, Election: true, Name: "election/r", Op: 1},
		{Kind: KindEndSession, Session: 2, Op: 1 << 40},
		{Kind: KindCampaign, Session: 18, Seq: 19, Floor: 20, Wait: true, Name: "election/ü", Value: "10.0.0.1:7001"},
		{Kind: KindCampaign, Session: 18, Seq: math.MaxUint64, Name: strings.Repeat("e", MaxNameLen), Value: strings.Repeat("v", MaxValueLen)},
		{Kind: KindCampaign, Session: 18, Seq: 21, Name: "e", Value: ""},
		{Kind: KindResign, Session: 22, Seq: 23, Floor: 24, Token: 25 << TokenShift, Name: "e"},
		{Kind: KindProclaim, Session: 26, Seq: 27, Floor: 28, Token: math.MaxUint64, Name: "e", Value: "\x00\xff binary"},
		{Kind: KindAcquireShared, Session: 29, Seq: 30, Floor: 31, Wait: true, Name: "rw"},
		{Kind: KindAcquireShared, Session: 29, Seq: math.MaxUint64, Permits: math.MaxUint64, Name: "sem"},
		{Kind: KindOpenSession, Nonce: 2, TTL: 3, Owner: 4, Delay: math.MaxUint64},
		{Kind: KindAcquire, Session: 5, Seq: 9, Floor: 7, Wait: true, Name: "held/briefly", MaxHold: math.MaxUint64},
		{Kind: KindAcquireShared, Session: 29, Seq: 32, Permits: 3, Name: "sem", MaxHold: 1},
		{Kind: KindCampaign, Session: 18, Seq: 33, Name: "e", Value: "v", MaxHold: 5e9},
		{Kind: KindUndelay, Token: math.MaxUint64, Mark: 7, Name: "delayed"},
		{Kind: KindExpireGrant, Token: 9 << TokenShift, Mark: math.MaxUint64, Name: "held/briefly"},
		{Kind: KindExpireGrant, Token: 1, Mark: 1, Election: true, Name: "e"},
		{Kind: KindKeepAliveBatch, Owner: 2, Renew: []Renewal{{Session: 1, Floor: 0}, {Session: 1 << 40, Floor: 9}, {Session: math.MaxUint64, Floor: math.MaxUint64}}},
		{Kind: KindKeepAliveBatch, Owner: math.MaxUint64, Renew: []Renewal{{Session: 7, Floor: 1}}},
		{Kind: KindOpenSession, Nonce: 3, TTL: 4, Owner: 5, Name: "reindex@worker-3"},
		{Kind: KindOpenSession, Nonce: 4, TTL: 4, Owner: 5, Name: strings.Repeat("é", MaxSessionNameLen/2)},
		{Kind: KindOpenSession, Nonce: 5, TTL: 4, Owner: 5, Name: "part", Parent: 3 << TokenShift},
		{Kind: KindOpenSession, Nonce: 6, TTL: 4, Owner: 5, Parent: math.MaxUint64},
		{Kind: KindGate, Gate: Gate{Codec: 10, Snapshot: 8}},
		{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}},
		{Kind: KindGate, Gate: Baseline},
		{Kind: KindGate}, // invalid for Apply, fine for the codec
		{Kind: KindSeal},
	}
}

func TestBatchRoundTrip(t *testing.T) {
	cmds := everyKind()
	for i := range cmds {
		one := cmds[i : i+1]
		got, err := DecodeBatch(AppendBatch(nil, one), nil)
		require.NoError(t, err)
		require.Equal(t, one, got, cmds[i].Kind.String())
	}
	data := AppendBatch(nil, cmds)
	got, err := DecodeBatch(data, nil)
	require.NoError(t, err)
	require.Equal(t, cmds, got)

	// AppendBatch appends; DecodeBatch appends too.
	prefix := []byte("prefix")
	data2 := AppendBatch(slices.Clone(prefix), cmds)
	require.Equal(t, append(slices.Clone(prefix), data...), data2)
	dst := []Command{{Kind: KindCloseSession, Session: 1}}
	got, err = DecodeBatch(data, dst)
	require.NoError(t, err)
	require.Equal(t, append(dst, cmds...), got)

	// Stamped alike, as a proposer stamps a batch, the commands come back
	// as they were, time and all; at any time up to the largest.
	for _, at := range []uint64{1, 1_780_000_000_000_000_000, math.MaxUint64} {
		stamped := everyKind()
		for i := range stamped {
			stamped[i].At = at
		}
		got, err := DecodeBatch(AppendBatch(nil, stamped), nil)
		require.NoError(t, err)
		require.Equal(t, stamped, got)
		require.Equal(t, AppendBatch(nil, stamped), AppendBatchAt(nil, at, everyKind()))
	}
	// Stamped apart, the entry takes the latest.
	apart := everyKind()[:3]
	apart[0].At, apart[1].At = 5, 9
	got, err = DecodeBatch(AppendBatch(nil, apart), nil)
	require.NoError(t, err)
	for _, c := range got {
		require.Equal(t, uint64(9), c.At)
	}
}

func TestBatchWritesOnlyTheKindsFields(t *testing.T) {
	all := Command{Wait: true, Election: true, Session: 1, Seq: 2, Floor: 3, Nonce: 4, TTL: 5, Owner: 6, Token: 7, Target: 8,
		Term: 9, Mark: 10, Permits: 11, Delay: 12, MaxHold: 13, Name: "n", Value: "v", At: 14, Op: 15, Gate: Gate{Codec: 9, Snapshot: 7}, Parent: 16}
	for _, tc := range []struct {
		kind Kind
		want Command
	}{
		{KindOpenSession, Command{Kind: KindOpenSession, Nonce: 4, TTL: 5, Owner: 6, Delay: 12, Name: "n", Parent: 16}},
		{KindKeepAlive, Command{Kind: KindKeepAlive, Session: 1, Floor: 3}},
		{KindCloseSession, Command{Kind: KindCloseSession, Session: 1, Floor: 3}},
		{KindAcquire, Command{Kind: KindAcquire, Wait: true, Session: 1, Seq: 2, Floor: 3, Name: "n", MaxHold: 13}},
		{KindRelease, Command{Kind: KindRelease, Session: 1, Seq: 2, Floor: 3, Token: 7, Name: "n"}},
		{KindCancel, Command{Kind: KindCancel, Session: 1, Target: 8, Floor: 3, Election: true, Name: "n"}},
		{KindExpire, Command{Kind: KindExpire, Session: 1, Target: 8, Mark: 10}},
		{KindCampaign, Command{Kind: KindCampaign, Wait: true, Session: 1, Seq: 2, Floor: 3, Name: "n", Value: "v", MaxHold: 13}},
		{KindResign, Command{Kind: KindResign, Session: 1, Seq: 2, Floor: 3, Token: 7, Name: "n"}},
		{KindProclaim, Command{Kind: KindProclaim, Session: 1, Seq: 2, Floor: 3, Token: 7, Name: "n", Value: "v"}},
		{KindResume, Command{Kind: KindResume, Session: 1, Nonce: 4, Owner: 6, Target: 8, TTL: 5}},
		{KindLeaderStart, Command{Kind: KindLeaderStart, Owner: 6, Term: 9, Nonce: 4}},
		{KindRevoke, Command{Kind: KindRevoke, Token: 7, Election: true, Name: "n", Op: 15}},
		{KindEndSession, Command{Kind: KindEndSession, Session: 1, Op: 15}},
		{KindAcquireShared, Command{Kind: KindAcquireShared, Wait: true, Session: 1, Seq: 2, Floor: 3, Permits: 11, Name: "n", MaxHold: 13}},
		{KindUndelay, Command{Kind: KindUndelay, Token: 7, Mark: 10, Name: "n"}},
		{KindExpireGrant, Command{Kind: KindExpireGrant, Token: 7, Mark: 10, Election: true, Name: "n"}},
		{KindKeepAliveBatch, Command{Kind: KindKeepAliveBatch, Owner: 6, Renew: []Renewal{{Session: 1, Floor: 3}}}},
		{KindGate, Command{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}}},
		{KindSeal, Command{Kind: KindSeal}}, // it carries nothing
	} {
		c := all
		if tc.kind == KindKeepAliveBatch {
			c.Renew = []Renewal{{Session: 1, Floor: 3}}
		}
		c.Kind = tc.kind
		got, err := DecodeBatch(AppendBatch(nil, []Command{c}), nil)
		require.NoError(t, err)
		tc.want.At = 14 // every kind: the entry's time
		require.Equal(t, []Command{tc.want}, got, tc.kind.String())
	}
}

func TestBatchWireFormat(t *testing.T) {
	// The encoding is part of the replicated log: it must never change.
	got := AppendBatch(nil, []Command{
		{Kind: KindAcquire, Session: 1, Seq: 2, Floor: 3, Wait: true, Name: "ab"},
		{Kind: KindOpenSession, Nonce: 300, TTL: 1, Owner: 2},
		{Kind: KindExpire, Session: 4, Target: 5, Mark: 6},
		{Kind: KindLeaderStart, Owner: 3, Term: 9, Nonce: 4},
		{Kind: KindCloseSession, Session: 8, Floor: 7},
		{Kind: KindResume, Session: 8, Nonce: 300, Owner: 2, Target: 5, TTL: 7},
		{Kind: KindAcquireShared, Session: 1, Seq: 2, Floor: 3, Wait: true, Permits: 5, Name: "s"},
		{Kind: KindOpenSession, Nonce: 300, TTL: 1, Owner: 2, Delay: 5},
		{Kind: KindAcquire, Session: 1, Seq: 2, Floor: 3, Name: "ab", MaxHold: 300},
		{Kind: KindCampaign, Session: 1, Seq: 2, Floor: 3, Wait: true, Name: "e", Value: "v", MaxHold: 4},
		{Kind: KindUndelay, Token: 6, Mark: 7, Name: "d"},
		{Kind: KindExpireGrant, Token: 6, Mark: 7, Election: true, Name: "e"},
		{Kind: KindKeepAliveBatch, Owner: 2, Renew: []Renewal{{Session: 5, Floor: 1}, {Session: 300, Floor: 2}}},
	})
	v3 := []byte{
		3, 12, // version, count
		4, 1, 2, 3, 1, 2, 'a', 'b', 0, // acquire (max hold 0)
		1, 0xac, 0x02, 1, 2, 0, // open-session (delay 0)
		7, 4, 5, 6, // expire
		11, 3, 9, 4, // leader-start
		3, 8, 7, // close-session
		14, 8, 0xac, 0x02, 2, 5, // resume
		15, 1, 2, 3, 1, 5, 1, 's', 0, // acquire-shared
		1, 0xac, 0x02, 1, 2, 5, // open-session with a lock-delay
		4, 1, 2, 3, 0, 2, 'a', 'b', 0xac, 0x02, // acquire with a maximum hold
		8, 1, 2, 3, 1, 1, 'e', 1, 'v', 4, // campaign with a maximum hold
		16, 6, 7, 1, 'd', // undelay
		17, 6, 7, 1, 1, 'e', // expire-grant
	}
	batch := []byte{
		18, 2, 2, 5, 1, 0xa7, 0x02, 2, // keep-alive-batch: owner, count, (ID delta, floor)*
	}
	resumeV3 := []byte{14, 8, 0xac, 0x02, 2, 5}
	at := bytes.Index(v3, resumeV3) + len(resumeV3)
	v5 := slices.Concat([]byte{5, 13}, v3[2:at], []byte{7}, v3[at:], batch) // the resume's TTL follows its attempt
	// Version 6: the entry's time follows the version, and each open's
	// name its lock-delay.
	v6 := slices.Concat([]byte{6, 0, 13}, v5[2:])
	for _, open := range [][]byte{{1, 0xac, 0x02, 1, 2, 0, 7}, {1, 0xac, 0x02, 1, 2, 5, 4}} {
		require.Equal(t, 1, bytes.Count(v6, open))
		v6 = bytes.Replace(v6, open, slices.Concat(open[:len(open)-1], []byte{0}, open[len(open)-1:]), 1)
	}
	// Version 7 changed none of these kinds: only the version byte.
	v7 := slices.Concat([]byte{7}, v6[1:])
	// Version 8 appended the keep flag to Resume, after its TTL.
	resumeV7 := slices.Concat(resumeV3, []byte{7})
	require.Equal(t, 1, bytes.Count(v7, resumeV7))
	at8 := bytes.Index(v7, resumeV7) + len(resumeV7)
	v8 := slices.Concat([]byte{8}, v7[1:at8], []byte{0}, v7[at8:])
	// Version 9 changed no layout: a group whose gate is the baseline
	// writes version 8 byte for byte, one whose gate is 9 the same with
	// its version.
	v9 := slices.Concat([]byte{9}, v8[1:])
	// Version 10 appended the parent to OpenSession, after its name: a
	// group whose gate is 9 still writes version 9 byte for byte.
	v10 := slices.Concat([]byte{10}, v9[1:])
	for _, open := range [][]byte{{1, 0xac, 0x02, 1, 2, 0, 0, 7}, {1, 0xac, 0x02, 1, 2, 5, 0, 4}} {
		require.Equal(t, 1, bytes.Count(v10, open))
		v10 = bytes.Replace(v10, open, slices.Concat(open[:len(open)-1], []byte{0}, open[len(open)-1:]), 1)
	}
	cmds11, err := DecodeBatch(got, nil)
	require.NoError(t, err)
	at10, err := AppendEntry(nil, Gate{Codec: 10, Snapshot: 8}, 0, cmds11)
	require.NoError(t, err)
	require.Equal(t, v10, at10, "version 10")
	// Version 11 appended the fence flag to Resume, after its keep flag
	// (0: unfenced, nothing follows): a group whose gate is 10 still
	// writes version 10 byte for byte.
	resumeV10 := slices.Concat(resumeV7, []byte{0})
	require.Equal(t, 1, bytes.Count(v10, resumeV10))
	at11 := bytes.Index(v10, resumeV10) + len(resumeV10)
	v11 := slices.Concat([]byte{11}, v10[1:at11], []byte{0}, v10[at11:])
	require.Equal(t, v11, got, "version 11")
	fenced := AppendBatchAt(nil, 0, []Command{{Kind: KindResume, Session: 8, Nonce: 300, Owner: 2, Target: 5, TTL: 7, Keep: true,
		Fence: true, Epoch: 4, Parent: 6}})
	require.Equal(t, slices.Concat([]byte{11, 0, 1}, resumeV7, []byte{1, 1, 4, 6}), fenced, "version 11's fence")
	parent := []Command{{Kind: KindOpenSession, Nonce: 300, TTL: 1, Owner: 2, Parent: 300}}
	atGate10, err := AppendEntry(nil, Gate{Codec: 10, Snapshot: 8}, 0, parent)
	require.NoError(t, err)
	require.Equal(t, []byte{10, 0, 1, 1, 0xac, 0x02, 1, 2, 0, 0, 0xac, 0x02}, atGate10, "version 10's parent")
	atGate9, err := AppendEntry(nil, Gate{Codec: 9, Snapshot: 7}, 0, parent)
	require.NoError(t, err)
	require.Equal(t, []byte{9, 0, 1, 1, 0xac, 0x02, 1, 2, 0, 0}, atGate9, "at gate 9, an open without its parent")
	dropped, err := DecodeBatch(atGate9, nil)
	require.NoError(t, err)
	require.Equal(t, []Command{{Kind: KindOpenSession, Nonce: 300, TTL: 1, Owner: 2}}, dropped, "parent 0: unknown")
	cmds8, err := DecodeBatch(got, nil)
	require.NoError(t, err)
	baseline, err := AppendEntry(nil, Baseline, 0, cmds8)
	require.NoError(t, err)
	require.Equal(t, v8, baseline, "version 8, at the baseline gate")
	gated, err := AppendEntry(nil, Gate{Codec: 9, Snapshot: 7}, 0, cmds8)
	require.NoError(t, err)
	require.Equal(t, v9, gated, "version 9, at gate 9")
	v9cmds, err := DecodeBatch(v9, nil)
	require.NoError(t, err)
	require.Equal(t, v9cmds, cmds8)
	raise, err := AppendEntry(nil, Baseline, 0, []Command{{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}}})
	require.NoError(t, err)
	require.Equal(t, []byte{9, 0, 1, 19, 9, 7}, raise, "version 9's gate")
	raise, err = AppendEntry(nil, Gate{Codec: 9, Snapshot: 7}, 0, []Command{{Kind: KindGate, Gate: Gate{Codec: 10, Snapshot: 8}}})
	require.NoError(t, err)
	require.Equal(t, []byte{10, 0, 1, 19, 10, 8}, raise, "the raise to 10, the first entry of version 10")
	v7cmds, err := DecodeBatch(v7, nil)
	require.NoError(t, err)
	v8cmds, err := DecodeBatch(v8, nil)
	require.NoError(t, err)
	require.Equal(t, v8cmds, v7cmds, "version 7 decodes to the same, without keep")
	kept := AppendBatchAt(nil, 0, []Command{{Kind: KindResume, Session: 8, Nonce: 300, Owner: 2, Target: 5, TTL: 7, Keep: true}})
	require.Equal(t, []byte{codecVersion, 0, 1, 14, 8, 0xac, 0x02, 2, 5, 7, 1, 0}, kept, "version 8's keep flag (then version 11's fence, off)")
	cmds, err := DecodeBatch(v6, nil)
	require.NoError(t, err)
	again, err := DecodeBatch(got, nil)
	require.NoError(t, err)
	require.Equal(t, again, cmds, "version 6 decodes to the same")
	// Version 7 appended the operation ID to Revoke and EndSession; a
	// version-6 entry's decode without one (0).
	ops := AppendBatchAt(nil, 0, []Command{{Kind: KindRevoke, Token: 6, Name: "ab", Op: 300}, {Kind: KindEndSession, Session: 8, Op: 5}})
	require.Equal(t, []byte{codecVersion, 0, 2, 12, 6, 0, 2, 'a', 'b', 0xac, 0x02, 13, 8, 5}, ops, "version 7's operation IDs")
	cmds, err = DecodeBatch([]byte{6, 0, 2, 12, 6, 0, 2, 'a', 'b', 13, 8}, nil)
	require.NoError(t, err)
	require.Equal(t, []Command{{Kind: KindRevoke, Token: 6, Name: "ab"}, {Kind: KindEndSession, Session: 8}}, cmds)
	named := AppendBatchAt(nil, 300, []Command{{Kind: KindOpenSession, Nonce: 300, TTL: 1, Owner: 2, Delay: 5, Name: "w"},
		{Kind: KindCloseSession, Session: 8, Floor: 7, At: 99}})
	require.Equal(t, []byte{codecVersion, 0xac, 0x02, 2, 1, 0xac, 0x02, 1, 2, 5, 1, 'w', 0, 3, 8, 7}, named,
		"the entry's time, whatever its commands carry; an open's name (and its parent, 0)")
	cmds, err = DecodeBatch(named, nil)
	require.NoError(t, err)
	require.Equal(t, []Command{{Kind: KindOpenSession, Nonce: 300, TTL: 1, Owner: 2, Delay: 5, Name: "w", At: 300},
		{Kind: KindCloseSession, Session: 8, Floor: 7, At: 300}}, cmds)
	// The same commands in a version-5 or version-4 entry (and, but the
	// batch, in a version-3 one) decode alike, without the resume's TTL
	// (before 5) and without the time, under the old rules.
	v4 := slices.Concat([]byte{4, 13}, v3[2:], batch)
	all, err := DecodeBatch(got, nil)
	require.NoError(t, err)
	cmds, err = DecodeBatch(v5, nil)
	require.NoError(t, err)
	require.Equal(t, all, cmds, "version 5 decodes to the same, with its rules")
	for _, old := range [][]byte{v3, v4} {
		cmds, err := DecodeBatch(old, nil)
		require.NoError(t, err)
		require.Equal(t, asOld(all[:len(cmds)], false), cmds)
	}
	// A version-2 entry of the same commands (but the last) decodes to them.
	v2 := []byte{2, 4, 4, 1, 2, 3, 1, 2, 'a', 'b', 1, 0xac, 0x02, 1, 2, 7, 4, 5, 6, 11, 3, 9, 4}
	cmds, err = DecodeBatch(v2, nil)
	require.NoError(t, err)
	want, err := DecodeBatch(got, nil)
	require.NoError(t, err)
	require.Equal(t, asOld(want[:4], false), cmds)
	// AcquireShared, Undelay and ExpireGrant are not kinds of version 2
	// (nor 1).
	for _, v := range []byte{1, 2} {
		for _, c := range [][]byte{{15, 1, 2, 3, 1, 5, 1, 's'}, {16, 6, 7, 1, 'd'}, {17, 6, 7, 1, 1, 'e'}} {
			_, err = DecodeBatch(append([]byte{v, 1}, c...), nil)
			require.ErrorIs(t, err, ErrCorrupt)
		}
	}
	require.Equal(t, []byte{2, 2, 0xac, 0x02, 7, 0}, AppendResults(nil, []Result{{Status: Granted, Value: 300}, {Status: Cancelled, Value: 0}}))
}

// asOld returns cmds as an entry of an older version (version 1 with v1)
// decodes them: with its rules, and without the fields versions 5 and 6
// added.
func asOld(cmds []Command, v1 bool) []Command {
	out := slices.Clone(cmds)
	for i := range out {
		out[i].pre5, out[i].v1, out[i].At = true, v1, 0
		switch out[i].Kind {
		case KindResume:
			out[i].TTL = 0
		case KindOpenSession:
			out[i].Name = ""
		}
	}
	return out
}

// asVersion returns entry, written by today's codec, as an entry of the
// older version v writes the same commands: without the entry's time
// (version 6). It is for commands whose fields did not change since v.
func asVersion(entry []byte, v byte) []byte {
	_, n := binary.Uvarint(entry[1:])
	return append([]byte{v}, entry[1+n:]...)
}

func TestBatchMaxBatch(t *testing.T) {
	cmds := slices.Repeat([]Command{{Kind: KindCloseSession, Session: 3}}, MaxBatch)
	got, err := DecodeBatch(AppendBatch(nil, cmds), nil)
	require.NoError(t, err)
	require.Len(t, got, MaxBatch)
	_, err = DecodeBatch(AppendBatch(nil, append(cmds, cmds[0])), nil)
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestDecodeBatchErrors(t *testing.T) {
	valid := AppendBatch(nil, everyKind())
	u := binary.AppendUvarint
	acquire := func(flag byte, name []byte) []byte {
		b := []byte{codecVersion, 0, 1, byte(KindAcquire), 1, 2, 3, flag}
		return u(append(u(b, uint64(len(name))), name...), 0)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"version 0", append([]byte{0}, valid[1:]...)},
		{"gate in a version-8 entry", []byte{8, 0, 1, byte(KindGate), 9, 7}},
		{"gate without its snapshot version", []byte{codecVersion, 0, 1, byte(KindGate), 9}},
		{"resume with a bad keep flag", []byte{codecVersion, 0, 1, byte(KindResume), 1, 2, 3, 4, 5, 2}},
		{"resume in a version-8 entry without its keep flag", []byte{codecVersion, 0, 1, byte(KindResume), 1, 2, 3, 4, 5}},
		{"revoke without its operation ID", []byte{codecVersion, 0, 1, byte(KindRevoke), 6, 0, 1, 'a'}},
		{"end-session without its operation ID", []byte{codecVersion, 0, 1, byte(KindEndSession), 6}},
		{"no time", []byte{codecVersion}},
		{"session name longer than MaxSessionNameLen", AppendBatch(nil, []Command{{Kind: KindOpenSession, Nonce: 1, TTL: 1,
			Name: strings.Repeat("n", MaxSessionNameLen+1)}})},
		{"resume in a version-5 entry without its TTL", []byte{5, 1, byte(KindResume), 1, 2, 3, 4}},
		{"keep-alive batch in a version-3 entry", []byte{3, 1, byte(KindKeepAliveBatch), 2, 1, 5, 1}},
		{"keep-alive batch of none", []byte{codecVersion, 0, 1, byte(KindKeepAliveBatch), 2, 0}},
		{"keep-alive batch beyond MaxRenewals", slices.Concat(u([]byte{codecVersion, 0, 1, byte(KindKeepAliveBatch), 2}, MaxRenewals+1),
			slices.Repeat([]byte{1, 0}, MaxRenewals+1))},
		{"keep-alive batch counting more than its bytes", []byte{codecVersion, 0, 1, byte(KindKeepAliveBatch), 2, 3, 1, 0, 1, 0}},
		{"keep-alive batch naming a session twice", []byte{codecVersion, 0, 1, byte(KindKeepAliveBatch), 2, 2, 5, 0, 0, 0}},
		{"keep-alive batch naming session 0", []byte{codecVersion, 0, 1, byte(KindKeepAliveBatch), 2, 1, 0, 0}},
		{"keep-alive batch IDs past 2^64", slices.Concat([]byte{codecVersion, 0, 1, byte(KindKeepAliveBatch), 2, 2},
			u(nil, math.MaxUint64), []byte{0, 1, 0})},
		{"resume in a version-2 entry", []byte{2, 1, byte(KindResume), 1, 2, 3}},
		{"leader-start in version 1", []byte{1, 1, byte(KindLeaderStart), 3, 9}},
		{"no count", []byte{codecVersion, 0}},
		{"zero count", []byte{codecVersion, 0, 0}},
		{"count beyond MaxBatch", u([]byte{codecVersion, 0}, MaxBatch+1)},
		{"huge count", u([]byte{codecVersion, 0}, math.MaxUint64)},
		{"overlong varint", append([]byte{codecVersion, 0}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
		{"fewer commands than counted", []byte{codecVersion, 0, 2, byte(KindCloseSession), 1}},
		{"trailing bytes", append(slices.Clone(valid), 0)},
		{"unknown kind 0", []byte{codecVersion, 0, 1, 0}},
		{"unknown kind maxKind+1", []byte{codecVersion, 0, 1, byte(maxKind) + 1, 1}},
		{"unknown kind 255", []byte{codecVersion, 0, 1, 255}},
		{"unknown kind after a good one", []byte{codecVersion, 0, 2, byte(KindCloseSession), 1, byte(maxKind) + 1, 1}},
		{"bad flag byte", acquire(2, []byte("n"))},
		{"flag byte 255", acquire(255, []byte("n"))},
		{"name longer than MaxNameLen", acquire(1, []byte(strings.Repeat("n", MaxNameLen+1)))},
		{"name longer than the data", append(u([]byte{codecVersion, 0, 1, byte(KindAcquire), 1, 2, 3, 0}, 5), "abc"...)},
		{"name length huge", u([]byte{codecVersion, 0, 1, byte(KindAcquire), 1, 2, 3, 0}, math.MaxUint64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBatch(tc.data, nil)
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
	for i := range len(valid) {
		_, err := DecodeBatch(valid[:i], nil)
		require.ErrorIs(t, err, ErrCorrupt, "truncated to %d bytes", i)
	}
	// What this build does not read is not corrupt: it is too new, and
	// says which version it is.
	for _, tc := range []struct {
		name, msg string
		data      []byte
	}{
		{"version 12", "log version 12; this build reads up to 11", append([]byte{codecVersion + 1}, valid[1:]...)},
		{"version 255", "log version 255", append([]byte{255}, valid[1:]...)},
		{"gate to log version 12", "log version 12; this build reads up to 11", []byte{codecVersion, 0, 1, byte(KindGate), 12, 9}},
		{"gate to snapshot version 10", "snapshot version 10; this build reads up to 9", []byte{codecVersion, 0, 1, byte(KindGate), 11, 10}},
		{"gate to a huge version", "log version", append(u([]byte{codecVersion, 0, 1, byte(KindGate)}, math.MaxUint64), 7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBatch(tc.data, nil)
			require.ErrorIs(t, err, ErrVersionTooNew)
			require.NotErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, tc.msg)
		})
	}
	// Sanity: the bad-flag builder makes a valid entry with a good flag.
	for _, flag := range []byte{0, 1} {
		got, err := DecodeBatch(acquire(flag, []byte(strings.Repeat("n", MaxNameLen))), nil)
		require.NoError(t, err)
		require.Equal(t, flag == 1, got[0].Wait)
	}
}

func TestResultsRoundTrip(t *testing.T) {
	for _, rs := range [][]Result{
		{},
		{{Status: OK, Value: 1 << TokenShift}},
		{{Status: Granted, Value: math.MaxUint64}, {Status: Queued, Value: 0}, {Status: Locked, Value: 0}, {Status: NotHeld, Value: 0}, {Status: UnknownSession, Value: 0},
			{Status: Cancelled, Value: 0}, {Status: Stale, Value: 0}, {Status: Invalid, Value: 0}, {Status: NotApplied, Value: 0}, {Status: LimitExceeded, Value: 0}, {Status: OK, Value: 12345},
			{Status: Refused, Value: 2, Refused: []uint64{7, 1 << 50}}, {Status: Conflict, Value: 3}},
		slices.Repeat([]Result{{Status: Granted, Value: 1 << 40}}, MaxBatch),
	} {
		data := AppendResults(nil, rs)
		got, err := DecodeResults(data, nil)
		require.NoError(t, err)
		if len(rs) == 0 {
			require.Empty(t, got)
		} else {
			require.Equal(t, rs, got)
		}
		// Truncation inside the count is TestDecodeResultsRejectsMalformedCount.
		_, countLen := binary.Uvarint(data)
		for i := countLen; i < min(len(data), 64); i++ {
			_, err := DecodeResults(data[:i], nil)
			require.ErrorIs(t, err, ErrCorrupt, "truncated to %d bytes", i)
		}
		_, err = DecodeResults(append(slices.Clone(data), 0), nil)
		require.ErrorIs(t, err, ErrCorrupt, "trailing byte")
	}
	dst := []Result{{Status: OK, Value: 9}}
	got, err := DecodeResults(AppendResults(nil, []Result{{Status: Queued, Value: 0}}), dst)
	require.NoError(t, err)
	require.Equal(t, []Result{{Status: OK, Value: 9}, {Status: Queued, Value: 0}}, got)
}

func TestDecodeResultsErrors(t *testing.T) {
	u := binary.AppendUvarint
	for _, data := range [][]byte{
		u(nil, MaxBatch+1),
		u(nil, math.MaxUint64),
		{1},
		{1, byte(OK)},
		{2, byte(OK), 0},
		{1, byte(OK), 0x80},
		{0, 0},
	} {
		_, err := DecodeResults(data, nil)
		require.ErrorIs(t, err, ErrCorrupt, "%x", data)
	}
}

// TestDecodeResultsRejectsMalformedCount: a result list whose count is
// missing or not a valid varint is not a result list. (DecodeResults does
// not check the decoder's error after reading the count: this fails until
// codec.go checks it.)
func TestDecodeResultsRejectsMalformedCount(t *testing.T) {
	for _, data := range [][]byte{
		nil,
		{},
		{0x80},       // truncated varint
		{0xff, 0xff}, // truncated varint
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // overflows 64 bits
	} {
		rs, err := DecodeResults(data, nil)
		require.ErrorIs(t, err, ErrCorrupt, "%x decoded as %v", data, rs)
	}
}
