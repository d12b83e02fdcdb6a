// Package wire is the byte format of the call connection one replica opens
// to another (transport.Caller) to reach a group it does not run: a mirror's
// subscription, a backup's export, a membership read. It encodes and
// decodes them, and carries a group's state in parts, the one way both a
// mirror's first state and a backup's snapshot file travel (parts.go):
// who sends what, and when, is the business of the mirror and the serving
// side in internal/replica, which both import it.
//
// Peers of older versions talk to newer ones, so the bytes of every message
// are fixed (testdata/golden.hex): a new field is a new kind, never a change
// to an old one.
//
// It imports internal/fsm for the result of a command (fsm.Result), which a
// result message carries field by field.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
)

// The messages of a mirror's call connection (internal/replica/mirror, and
// internal/replica/serve's feed.go), each one transport call message:
//
//	mirror -> server: subscribe(shard, name)  once, first
//	                  propose(id, timeout, failFast, command)
//	                  read(id, timeout, failFast)
//	server -> mirror: snapshot(index, leader, state)  once, first
//	                | snapshotPart(index, leader, total, part)...  first, instead,
//	                  when the state is larger than one message: its parts in
//	                  order, exactly total bytes (SendParts, RecvParts)
//	                  entries(leader, [index, data]...)
//	                  result(id, index, code, text, status, value, refused)
//	                  refuse(code, text)
//	                  ping(leader)
//
// A backup's call connection (internal/replica's exportgroup.go and
// internal/replica/serve's export.go) opens with an export request
// instead, and is answered with the group's exported snapshot: its
// metadata file, then its snapshot file in parts of at most MaxExportData
// bytes (SendParts, RecvParts), pings while the copy is being written:
//
//	backup -> server: export(shard, name, timeout)  once, first, alone
//	server -> backup: ping(leader)...  exportHead(index, sessions, locks, elections, metadata)
//	                  exportData(bytes)...  (exactly the file's size)
//	                | ping(leader)...  refuse(code, text)
//
// A replica that does not run a group reads its membership from one of
// its voters on a call connection of its own (internal/replica's
// mirror_members.go):
//
//	reader -> server: members(shard, name, timeout)  once, first, alone
//	server -> reader: membership(config change index, voters, non-voting, removed)
//	                | refuse(code, text)
//
// Each message is a kind byte and its fields in order: numbers as
// uvarints, bytes and text as a uvarint length and the bytes. Decoding
// checks every length against what is left and the bounds below, and
// refuses trailing bytes: a peer's bytes never make a panic or an
// allocation beyond the message's own size.
const (
	KindSubscribe byte = 1
	KindPropose   byte = 2
	KindRead      byte = 3
	KindSnapshot  byte = 4
	KindEntries   byte = 5
	KindResult    byte = 6
	KindRefuse    byte = 7
	KindPing      byte = 8
	// A backup's export of a group it does not run.
	KindExport     byte = 9
	KindExportHead byte = 10
	KindExportData byte = 11

	KindMembers    byte = 12
	KindMembership byte = 13

	KindSnapshotPart byte = 14
)

// The timing of a call connection: its server pings every PingEvery (while
// it has nothing else to send), and a side that has heard nothing for
// IdleAfter gives the connection up.
const (
	PingEvery = 5 * time.Second
	IdleAfter = 15 * time.Second
)

// Error codes of a result or a refusal: what the mirror does with it.
const (
	CodeOK          byte = 0
	CodeUnavailable byte = 1 // ErrUnavailable: the caller may retry
	CodeNoQuorum    byte = 2 // ErrUnavailable and ErrNoQuorum
	CodeElsewhere   byte = 3 // the server does not run the group (any more): ask another
	CodeGated       byte = 4 // fsm.ErrVersionGated
	CodeInvalid     byte = 5 // anything else, named in the text
	maxCode              = CodeInvalid
)

// Bounds a decoder holds a peer's message to.
const (
	// MaxText bounds a result's or a refusal's text.
	MaxText = 4 << 10
	// MaxEntries bounds the entries of one entries message.
	MaxEntries = 1 << 16
	// maxWireMeta bounds an exported snapshot's metadata file, as a
	// backup file does.
	maxWireMeta = 1 << 20
	// MaxStatePart bounds one part of a state sent in parts, and
	// MaxState the whole state a mirror assembles from them.
	MaxStatePart        = 4 << 20
	MaxState     uint64 = 4 << 30
	// MaxExportData bounds the snapshot bytes of one exportData message.
	MaxExportData = 1 << 20
)

// ErrMalformed reports a message that is not one of the above.
var ErrMalformed = errors.New("fencelock: malformed mirror message")

// Entry is one applied log entry an entries message carries.
type Entry struct {
	Index uint64
	Data  []byte
}

// Msg is one message; which fields count depends on Kind.
type Msg struct {
	Kind                     byte
	ID, Index, Leader, Shard uint64
	Timeout                  uint64 // milliseconds; 0: none
	FailFast                 bool
	Name                     string
	Data                     []byte // the command, or the state
	Entries                  []Entry
	Code                     byte
	Text                     string
	Res                      fsm.Result
	// An exportHead's counts of what the group held at its read barrier.
	Sessions, Locks, Elections uint64
	// A membership's answer.
	Mem Membership
	// A snapshot part's: the size of the whole state.
	Total uint64
}

// Membership is a group's membership as of a linearizable read, as a
// membership message carries it (internal/replica names it
// replica.Membership; the root's Membership documents the fields).
type Membership struct {
	Voters    map[uint64]string // voting replicas: ID -> raft address
	NonVoting map[uint64]string // non-voting replicas: ID -> raft address
	// Removed lists, in increasing order, the IDs removed from the group.
	// They can never be used again.
	Removed []uint64
	// ConfigChangeIndex is the raft log index of the last applied membership
	// change: it rises with every change.
	ConfigChangeIndex uint64
}

// maxWireAddr bounds a member's raft address in a membership.
const maxWireAddr = 256

// appendMembers appends members, in ID order.
func appendMembers(b []byte, members map[uint64]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(members)))
	for _, id := range slices.Sorted(maps.Keys(members)) {
		b = appendBytes(binary.AppendUvarint(b, id), []byte(members[id]))
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func boolByte(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// Encode appends m's encoding to b.
func (m *Msg) Encode(b []byte) []byte {
	u := binary.AppendUvarint
	b = append(b, m.Kind)
	switch m.Kind {
	case KindSubscribe:
		b = u(b, m.Shard)
		b = appendBytes(b, []byte(m.Name))
	case KindPropose:
		b = u(u(u(b, m.ID), m.Timeout), boolByte(m.FailFast))
		b = appendBytes(b, m.Data)
	case KindRead:
		b = u(u(u(b, m.ID), m.Timeout), boolByte(m.FailFast))
	case KindSnapshot:
		b = u(u(b, m.Index), m.Leader)
		b = appendBytes(b, m.Data)
	case KindEntries:
		b = u(u(b, m.Leader), uint64(len(m.Entries)))
		for _, e := range m.Entries {
			b = appendBytes(u(b, e.Index), e.Data)
		}
	case KindResult:
		b = u(u(b, m.ID), m.Index)
		b = append(b, m.Code)
		b = appendBytes(b, []byte(m.Text))
		b = append(b, byte(m.Res.Status))
		b = u(u(b, m.Res.Value), uint64(len(m.Res.Refused)))
		for _, id := range m.Res.Refused {
			b = u(b, id)
		}
	case KindRefuse:
		b = append(b, m.Code)
		b = appendBytes(b, []byte(m.Text))
	case KindPing:
		b = u(b, m.Leader)
	case KindExport, KindMembers: // a request naming a group, with a timeout
		b = u(b, m.Shard)
		b = appendBytes(b, []byte(m.Name))
		b = u(b, m.Timeout)
	case KindExportHead:
		b = u(u(u(u(b, m.Index), m.Sessions), m.Locks), m.Elections)
		b = appendBytes(b, m.Data)
	case KindExportData:
		b = appendBytes(b, m.Data)
	case KindSnapshotPart:
		b = u(u(u(b, m.Index), m.Leader), m.Total)
		b = appendBytes(b, m.Data)
	case KindMembership:
		b = u(b, m.Mem.ConfigChangeIndex)
		b = appendMembers(b, m.Mem.Voters)
		b = appendMembers(b, m.Mem.NonVoting)
		b = u(b, uint64(len(m.Mem.Removed)))
		for _, id := range m.Mem.Removed {
			b = u(b, id)
		}
	}
	return b
}

// wireReader decodes fields, remembering the first error.
type wireReader struct {
	b   []byte
	err error
}

func (r *wireReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrMalformed, what)
	}
}

func (r *wireReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wireReader) byte1(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail(what)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// members reads a member list: IDs increasing from 1, each with an address.
func (r *wireReader) members(what string) map[uint64]string {
	n := r.uvarint(what)
	// Every member takes at least two bytes: no count beyond that.
	if r.err == nil && n > uint64(len(r.b))/2 {
		r.fail(what + " count")
	}
	if r.err != nil {
		return nil
	}
	out := make(map[uint64]string, n)
	last := uint64(0)
	for i := uint64(0); i < n && r.err == nil; i++ {
		id := r.uvarint(what + " replica")
		addr := r.bytes(what+" address", maxWireAddr)
		if r.err == nil && id <= last {
			r.fail(what + " not increasing")
		}
		last = id
		out[id] = string(addr)
	}
	return out
}

// bytes returns the next length-prefixed bytes, at most limit of them; a
// copy, as the message's buffer is the transport's.
func (r *wireReader) bytes(what string, limit int) []byte {
	n := r.uvarint(what)
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) || n > uint64(limit) {
		r.fail(what + " length")
		return nil
	}
	v := append([]byte(nil), r.b[:n]...)
	r.b = r.b[n:]
	return v
}

func (r *wireReader) flag(what string) bool {
	v := r.uvarint(what)
	if v > 1 {
		r.fail(what)
	}
	return v == 1
}

// Decode decodes one message; anything but exactly one well-formed
// message is an error wrapping ErrMalformed.
func Decode(b []byte) (Msg, error) {
	if len(b) == 0 {
		return Msg{}, fmt.Errorf("%w: empty", ErrMalformed)
	}
	m := Msg{Kind: b[0]}
	r := &wireReader{b: b[1:]}
	switch m.Kind {
	case KindSubscribe:
		m.Shard = r.uvarint("shard")
		m.Name = string(r.bytes("name", 64))
	case KindPropose:
		m.ID, m.Timeout, m.FailFast = r.uvarint("id"), r.uvarint("timeout"), r.flag("fail fast")
		m.Data = r.bytes("command", len(b))
		if r.err == nil && len(m.Data) == 0 {
			r.fail("empty command")
		}
	case KindRead:
		m.ID, m.Timeout, m.FailFast = r.uvarint("id"), r.uvarint("timeout"), r.flag("fail fast")
	case KindSnapshot:
		m.Index, m.Leader = r.uvarint("index"), r.uvarint("leader")
		m.Data = r.bytes("state", len(b))
	case KindEntries:
		m.Leader = r.uvarint("leader")
		n := r.uvarint("entries")
		// Every entry takes at least two bytes: no count beyond that.
		if r.err == nil && (n == 0 || n > MaxEntries || n > uint64(len(r.b))/2) {
			r.fail("entry count")
		}
		if r.err == nil {
			m.Entries = make([]Entry, 0, n)
			last := uint64(0)
			for i := uint64(0); i < n && r.err == nil; i++ {
				e := Entry{Index: r.uvarint("entry index"), Data: r.bytes("entry", len(b))}
				if r.err == nil && e.Index <= last {
					r.fail("entry indexes not increasing")
				}
				last = e.Index
				m.Entries = append(m.Entries, e)
			}
		}
	case KindResult:
		m.ID, m.Index = r.uvarint("id"), r.uvarint("index")
		m.Code = r.byte1("code")
		m.Text = string(r.bytes("text", MaxText))
		m.Res.Status = fsm.Status(r.byte1("status"))
		m.Res.Value = r.uvarint("value")
		n := r.uvarint("refused")
		if r.err == nil && (n > fsm.MaxBatch || n > uint64(len(r.b))) {
			r.fail("refused count")
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			m.Res.Refused = append(m.Res.Refused, r.uvarint("refused session"))
		}
	case KindRefuse:
		m.Code = r.byte1("code")
		m.Text = string(r.bytes("text", MaxText))
	case KindPing:
		m.Leader = r.uvarint("leader")
	case KindExport, KindMembers:
		m.Shard = r.uvarint("shard")
		m.Name = string(r.bytes("name", 64))
		m.Timeout = r.uvarint("timeout")
	case KindExportHead:
		m.Index, m.Sessions = r.uvarint("index"), r.uvarint("sessions")
		m.Locks, m.Elections = r.uvarint("locks"), r.uvarint("elections")
		m.Data = r.bytes("metadata", maxWireMeta)
		if r.err == nil && len(m.Data) == 0 {
			r.fail("empty metadata")
		}
	case KindExportData:
		m.Data = r.bytes("snapshot data", MaxExportData)
		if r.err == nil && len(m.Data) == 0 {
			r.fail("empty snapshot data")
		}
	case KindSnapshotPart:
		m.Index, m.Leader, m.Total = r.uvarint("index"), r.uvarint("leader"), r.uvarint("state size")
		m.Data = r.bytes("state part", MaxStatePart)
		if r.err == nil && (m.Total == 0 || m.Total > MaxState) {
			r.fail("state size")
		}
		if r.err == nil && (len(m.Data) == 0 || uint64(len(m.Data)) > m.Total) {
			r.fail("state part size")
		}
	case KindMembership:
		m.Mem.ConfigChangeIndex = r.uvarint("config change index")
		m.Mem.Voters = r.members("voters")
		m.Mem.NonVoting = r.members("non-voting")
		n := r.uvarint("removed")
		if r.err == nil && n > uint64(len(r.b)) {
			r.fail("removed count")
		}
		if r.err == nil {
			m.Mem.Removed = make([]uint64, 0, n)
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			id := r.uvarint("removed replica")
			if r.err == nil && (id == 0 || (i > 0 && id <= m.Mem.Removed[i-1])) {
				r.fail("removed replicas not increasing")
			}
			m.Mem.Removed = append(m.Mem.Removed, id)
		}
	default:
		return Msg{}, fmt.Errorf("%w: kind %d", ErrMalformed, m.Kind)
	}
	if r.err == nil && m.Code > maxCode {
		r.fail("code")
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return Msg{}, r.err
	}
	return m, nil
}
