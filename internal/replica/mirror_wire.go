package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/fencelock/fencelock/internal/fsm"
)

// The messages of a mirror's call connection (mirror.go, mirror_serve.go),
// each one transport call message:
//
//	mirror -> server: subscribe(shard, name)  once, first
//	                  propose(id, timeout, failFast, command)
//	                  read(id, timeout, failFast)
//	server -> mirror: snapshot(index, leader, state)  once, first
//	                | snapshotPart(index, leader, total, part)...  first, instead,
//	                  when the state is larger than one message: its parts in
//	                  order, exactly total bytes (mirror_serve.go, sendState)
//	                  entries(leader, [index, data]...)
//	                  result(id, index, code, text, status, value, refused)
//	                  refuse(code, text)
//	                  ping(leader)
//
// A backup's call connection (exportgroup.go, serveexport.go) opens with
// an export request instead, and is answered with the group's exported
// snapshot: its metadata file, then its snapshot file in chunks of at most
// exportChunk bytes, pings while the copy is being written:
//
//	backup -> server: export(shard, name, timeout)  once, first, alone
//	server -> backup: ping(leader)...  exportHead(index, sessions, locks, elections, metadata)
//	                  exportData(bytes)...  (exactly the file's size)
//	                | ping(leader)...  refuse(code, text)
//
// A replica that does not run a group reads its membership from one of
// its voters on a call connection of its own (mirror_members.go):
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
	wireSubscribe byte = 1
	wirePropose   byte = 2
	wireRead      byte = 3
	wireSnapshot  byte = 4
	wireEntries   byte = 5
	wireResult    byte = 6
	wireRefuse    byte = 7
	wirePing      byte = 8
	// A backup's export of a group it does not run.
	wireExport     byte = 9
	wireExportHead byte = 10
	wireExportData byte = 11

	wireMembers    byte = 12
	wireMembership byte = 13

	wireSnapshotPart byte = 14
)

// Error codes of a result or a refusal: what the mirror does with it.
const (
	codeOK          byte = 0
	codeUnavailable byte = 1 // ErrUnavailable: the caller may retry
	codeNoQuorum    byte = 2 // ErrUnavailable and ErrNoQuorum
	codeElsewhere   byte = 3 // the server does not run the group (any more): ask another
	codeGated       byte = 4 // fsm.ErrVersionGated
	codeInvalid     byte = 5 // anything else, named in the text
	maxCode              = codeInvalid
)

const (
	maxWireText    = 4 << 10
	maxWireEntries = 1 << 16
	// maxWireMeta bounds an exported snapshot's metadata file, as a
	// backup file does.
	maxWireMeta = 1 << 20
	// maxSnapshotPart bounds one part of a state sent in parts, and
	// maxMirrorState the whole state a mirror assembles from them.
	maxSnapshotPart        = 4 << 20
	maxMirrorState  uint64 = 4 << 30
)

// errWire reports a message that is not one of the above.
var errWire = errors.New("fencelock: malformed mirror message")

type wireEntry struct {
	Index uint64
	Data  []byte
}

// wireMsg is one message; which fields count depends on Kind.
type wireMsg struct {
	Kind                     byte
	ID, Index, Leader, Shard uint64
	Timeout                  uint64 // milliseconds; 0: none
	FailFast                 bool
	Name                     string
	Data                     []byte // the command, or the state
	Entries                  []wireEntry
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

// encode appends m's encoding to b.
func (m *wireMsg) encode(b []byte) []byte {
	u := binary.AppendUvarint
	b = append(b, m.Kind)
	switch m.Kind {
	case wireSubscribe:
		b = u(b, m.Shard)
		b = appendBytes(b, []byte(m.Name))
	case wirePropose:
		b = u(u(u(b, m.ID), m.Timeout), boolByte(m.FailFast))
		b = appendBytes(b, m.Data)
	case wireRead:
		b = u(u(u(b, m.ID), m.Timeout), boolByte(m.FailFast))
	case wireSnapshot:
		b = u(u(b, m.Index), m.Leader)
		b = appendBytes(b, m.Data)
	case wireEntries:
		b = u(u(b, m.Leader), uint64(len(m.Entries)))
		for _, e := range m.Entries {
			b = appendBytes(u(b, e.Index), e.Data)
		}
	case wireResult:
		b = u(u(b, m.ID), m.Index)
		b = append(b, m.Code)
		b = appendBytes(b, []byte(m.Text))
		b = append(b, byte(m.Res.Status))
		b = u(u(b, m.Res.Value), uint64(len(m.Res.Refused)))
		for _, id := range m.Res.Refused {
			b = u(b, id)
		}
	case wireRefuse:
		b = append(b, m.Code)
		b = appendBytes(b, []byte(m.Text))
	case wirePing:
		b = u(b, m.Leader)
	case wireExport, wireMembers: // a request naming a group, with a timeout
		b = u(b, m.Shard)
		b = appendBytes(b, []byte(m.Name))
		b = u(b, m.Timeout)
	case wireExportHead:
		b = u(u(u(u(b, m.Index), m.Sessions), m.Locks), m.Elections)
		b = appendBytes(b, m.Data)
	case wireExportData:
		b = appendBytes(b, m.Data)
	case wireSnapshotPart:
		b = u(u(u(b, m.Index), m.Leader), m.Total)
		b = appendBytes(b, m.Data)
	case wireMembership:
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
		r.err = fmt.Errorf("%w: %s", errWire, what)
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

// decodeWire decodes one message; anything but exactly one well-formed
// message is an error wrapping errWire.
func decodeWire(b []byte) (wireMsg, error) {
	if len(b) == 0 {
		return wireMsg{}, fmt.Errorf("%w: empty", errWire)
	}
	m := wireMsg{Kind: b[0]}
	r := &wireReader{b: b[1:]}
	switch m.Kind {
	case wireSubscribe:
		m.Shard = r.uvarint("shard")
		m.Name = string(r.bytes("name", 64))
	case wirePropose:
		m.ID, m.Timeout, m.FailFast = r.uvarint("id"), r.uvarint("timeout"), r.flag("fail fast")
		m.Data = r.bytes("command", len(b))
		if r.err == nil && len(m.Data) == 0 {
			r.fail("empty command")
		}
	case wireRead:
		m.ID, m.Timeout, m.FailFast = r.uvarint("id"), r.uvarint("timeout"), r.flag("fail fast")
	case wireSnapshot:
		m.Index, m.Leader = r.uvarint("index"), r.uvarint("leader")
		m.Data = r.bytes("state", len(b))
	case wireEntries:
		m.Leader = r.uvarint("leader")
		n := r.uvarint("entries")
		// Every entry takes at least two bytes: no count beyond that.
		if r.err == nil && (n == 0 || n > maxWireEntries || n > uint64(len(r.b))/2) {
			r.fail("entry count")
		}
		if r.err == nil {
			m.Entries = make([]wireEntry, 0, n)
			last := uint64(0)
			for i := uint64(0); i < n && r.err == nil; i++ {
				e := wireEntry{Index: r.uvarint("entry index"), Data: r.bytes("entry", len(b))}
				if r.err == nil && e.Index <= last {
					r.fail("entry indexes not increasing")
				}
				last = e.Index
				m.Entries = append(m.Entries, e)
			}
		}
	case wireResult:
		m.ID, m.Index = r.uvarint("id"), r.uvarint("index")
		m.Code = r.byte1("code")
		m.Text = string(r.bytes("text", maxWireText))
		m.Res.Status = fsm.Status(r.byte1("status"))
		m.Res.Value = r.uvarint("value")
		n := r.uvarint("refused")
		if r.err == nil && (n > fsm.MaxBatch || n > uint64(len(r.b))) {
			r.fail("refused count")
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			m.Res.Refused = append(m.Res.Refused, r.uvarint("refused session"))
		}
	case wireRefuse:
		m.Code = r.byte1("code")
		m.Text = string(r.bytes("text", maxWireText))
	case wirePing:
		m.Leader = r.uvarint("leader")
	case wireExport, wireMembers:
		m.Shard = r.uvarint("shard")
		m.Name = string(r.bytes("name", 64))
		m.Timeout = r.uvarint("timeout")
	case wireExportHead:
		m.Index, m.Sessions = r.uvarint("index"), r.uvarint("sessions")
		m.Locks, m.Elections = r.uvarint("locks"), r.uvarint("elections")
		m.Data = r.bytes("metadata", maxWireMeta)
		if r.err == nil && len(m.Data) == 0 {
			r.fail("empty metadata")
		}
	case wireExportData:
		m.Data = r.bytes("snapshot data", exportChunk)
		if r.err == nil && len(m.Data) == 0 {
			r.fail("empty snapshot data")
		}
	case wireSnapshotPart:
		m.Index, m.Leader, m.Total = r.uvarint("index"), r.uvarint("leader"), r.uvarint("state size")
		m.Data = r.bytes("state part", maxSnapshotPart)
		if r.err == nil && (m.Total == 0 || m.Total > maxMirrorState) {
			r.fail("state size")
		}
		if r.err == nil && (len(m.Data) == 0 || uint64(len(m.Data)) > m.Total) {
			r.fail("state part size")
		}
	case wireMembership:
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
		return wireMsg{}, fmt.Errorf("%w: kind %d", errWire, m.Kind)
	}
	if r.err == nil && m.Code > maxCode {
		r.fail("code")
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return wireMsg{}, r.err
	}
	return m, nil
}
