package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire format of a raft entry (version 11):
//
//	entry   = version:byte at:uvarint count:uvarint command*count
//	command = kind:byte field*        (the fields of its kind, in the order below)
//
// Numbers are unsigned varints; a name or a value is a varint length and its
// bytes; the wait flag is one byte. Replies travel back as
//
//	results = count:uvarint (status:byte value:uvarint id:uvarint*)*count
//
// where only a Refused result has IDs (value of them). Replies never leave
// the replica that applied the entry, so their encoding has no versions.
//
// A change to the fields of a kind means a new version: a replica must decode
// every entry in its log, so old versions stay readable for good. A new kind
// means a new version too (minversion.go lists each kind's first): a build
// before the gate (version 9) skipped an entry of a kind it did not know as
// corrupt, so a kind may appear only in entries of a version every member
// of the group reads.
//
// Version 2 added LeaderStart (owner term nonce), the leader mark to Expire
// (session target mark), the wait flag to Campaign (after floor), Revoke
// (token election name) and EndSession (session), and changed how Apply bounds a session's replies.
// Version-1 entries still decode, and apply by version-1 rules (see
// Command.v1), so an old log replays to the state it produced. Up to
// version 8, writers wrote the newest version only, so an upgrade stopped
// every replica of a group; from version 9 they write their group's gate
// (version.go). Either way every entry of an older version precedes, in
// the log, every entry of a newer one.
//
// Version 3 added Resume (session nonce owner target), the floor to
// CloseSession (session floor), AcquireShared (session seq floor wait
// permits name) and the Conflict status. Its rules for the kinds of
// version 2 are version 2's (a version-2 log holds no shared grant or
// semaphore, so nothing it did can conflict, and no resumed session), so
// version-2 entries decode and apply alike. Version 3 also added the
// lock-delay to OpenSession (nonce ttl owner delay), the maximum hold to
// Acquire (session seq floor wait name maxhold), AcquireShared (session seq
// floor wait permits name maxhold) and Campaign (session seq floor wait
// name value maxhold), Undelay (kind 16: token mark name) and ExpireGrant
// (kind 17: token mark election name). A version-2 entry's open has no
// delay and its requests no maximum hold: both decode as 0, none.
//
// Version 4 added KeepAliveBatch (kind 18: owner count renewal*count, a
// renewal being the session's ID as the difference from the one before it,
// the first's from 0, then its floor: IDs strictly ascend), and the
// Refused status, whose result is followed by the IDs it lists (value of
// them). It changed no other kind, so version-3 entries decode and apply
// alike.
//
// Version 5 added the TTL to Resume (session nonce owner target ttl): the
// session's TTL as its holder believes it, which Apply refuses unless it is
// the session's (Conflict). It also changed what a Revoke does: the lock of
// a holder whose session has a lock-delay is delayed, as when the session
// is ended by an operator. Entries of older versions keep their rules
// (Command.pre5): a resume without a TTL is not checked, and a revoke frees
// at once, so an old log replays to the state it produced.
//
// Version 6 added the entry's time (at, after the version: see Command.At)
// and the session's name to OpenSession (nonce ttl owner delay name). It
// changed what no command of an older version does: an older entry's
// commands decode with At 0 (unknown) and its opens without a name, which
// is how they applied before, so an old log replays to the state it
// produced (with no names and unknown grant times, as a snapshot of that
// version restores too).
//
// Version 7 added the operation ID to Revoke (token election name op) and
// EndSession (session op): see Command.Op. A command with an ID applies at
// most once while the state remembers it (OpMemory), and a retry gets the
// first outcome. Older entries' revokes and ends decode with Op 0, none,
// and apply each time as they did, so an old log replays to the state it
// produced; nothing else changed.
//
// Version 8 added the keep flag to Resume (session nonce owner target ttl
// keep): see Command.Keep. Older entries' resumes decode without it and
// withdraw the session's queued requests as they did, so an old log
// replays to the state it produced; nothing else changed.
//
// Version 9 added the version gate: KindGate (kind 19: codec snapshot), the
// first entry a group writes at a new version, and the rule that a group
// writes the version of its gate (8 until a KindGate raises it) and a kind
// only from its version on (minversion.go). Its layout is version 8's: a
// version-8 entry is a version-9 entry with the first byte 8 and no kind
// newer than 8, which is what a group whose gate is the baseline writes.
// An entry of a version newer than this build reads is refused with
// ErrVersionTooNew (it was ErrCorrupt, and skipped) and stops the replica:
// skipping it would leave the replica with another state than its group's.
// Version 9 also added the group table's kinds (32 to 35: grouptable.go
// has their fields), which only the default group's log holds; like the
// gate, they are written only once the group's gate is 9.
//
// Version 10 added the parent to OpenSession (nonce ttl owner delay name
// parent): see Command.Parent. A group writes it only once its gate is 10:
// below, an open is written without it, byte for byte as version 9 wrote
// it, and decodes with Parent 0 (unknown), which is how the views show a
// part opened before (see State.Session). Nothing else changed.
//
// Version 11 added the fence to Resume (session nonce owner target ttl
// keep fence [epoch parent, if fence]): see Command.Fence. A fenced
// resume needs version 11 (NeedsCodec), so a group writes one only once
// its gate is 11 (below, it fails with ErrVersionGated, and the adopter
// resumes unfenced, as before). Older entries' resumes decode unfenced and
// apply as they did. Version 11 also added KindSeal (kind 20, no fields)
// and the Dropped status: a group being dropped seals itself, and from the
// seal on grants nothing (see KindSeal). A group writes it only once its
// gate is 11; below, a drop withdraws and revokes with the older kinds
// (internal/replica's drain). Nothing else changed.
const codecVersion = 11

// parentCodec is the first log version whose opens carry their parent.
const parentCodec = 10

// epochCodec is the first log version whose resumes may be fenced.
const epochCodec = 11

// sealCodec is the first log version that may seal a group (KindSeal).
const sealCodec = 11

// MaxBatch is the most commands one entry may carry.
const MaxBatch = 1 << 12

// ErrCorrupt reports bytes that are not a valid entry, result list or
// snapshot.
var ErrCorrupt = errors.New("fsm: corrupt encoding")

// AppendBatch appends the encoding of cmds, one raft entry, to dst. The
// entry's time is the latest At of its commands: a proposer that stamps
// every command of a batch alike (or calls AppendBatchAt) gets the commands
// back as they were.
func AppendBatch(dst []byte, cmds []Command) []byte {
	var at uint64
	for i := range cmds {
		at = max(at, cmds[i].At)
	}
	return AppendBatchAt(dst, at, cmds)
}

// AppendBatchAt appends the encoding of cmds, one raft entry, to dst, with
// at as the time of the entry, whatever At its commands carry: the proposer
// stamps an entry with its clock (nanoseconds since the Unix epoch) when it
// proposes it, and every command decoded from the entry has At at. 0 means
// unknown. The entry has the newest version, as a group whose gate has
// reached it writes (AppendEntry writes a group's gate).
func AppendBatchAt(dst []byte, at uint64, cmds []Command) []byte {
	return appendEntry(dst, codecVersion, at, cmds)
}

// AppendEntry appends the encoding of cmds, one raft entry stamped at (see
// AppendBatchAt), to dst, at the log version of gate g, the group's: an
// entry that carries a KindGate is written at the version that command
// raises the gate to (the first entry of the new version; every member
// reads it, or the leader would not have proposed it). A command whose
// kind needs a newer version (NeedsCodec) is an error wrapping
// ErrVersionGated, and so is a gate this build cannot write (below the
// baseline, beyond CodecVersion); dst is then returned unchanged.
func AppendEntry(dst []byte, g Gate, at uint64, cmds []Command) ([]byte, error) {
	v := g.Codec
	for i := range cmds {
		if cmds[i].Kind == KindGate {
			v = max(v, cmds[i].Gate.Codec)
		}
	}
	if v < Baseline.Codec || v > codecVersion {
		return dst, fmt.Errorf("%w: this build writes log versions %d to %d, not %d", ErrVersionGated, Baseline.Codec, codecVersion, v)
	}
	for i := range cmds {
		if need := NeedsCodec(&cmds[i]); need == 0 || need > v {
			return dst, fmt.Errorf("%w: %v needs log version %d; the group writes %d", ErrVersionGated, cmds[i].Kind, need, v)
		}
	}
	return appendEntry(dst, byte(v), at, cmds), nil
}

// appendEntry writes cmds as an entry of version v: version 8 and 9 share
// one layout, version 10 adds an open's parent, version 11 a resume's
// fence, and no older one is ever written again.
func appendEntry(dst []byte, v byte, at uint64, cmds []Command) []byte {
	dst = append(dst, v)
	dst = binary.AppendUvarint(dst, at)
	dst = binary.AppendUvarint(dst, uint64(len(cmds)))
	for i := range cmds {
		dst = appendCommand(dst, v, &cmds[i])
	}
	return dst
}

func appendCommand(dst []byte, v byte, c *Command) []byte {
	u := binary.AppendUvarint
	dst = append(dst, byte(c.Kind))
	switch c.Kind {
	case KindOpenSession:
		dst = u(u(u(u(dst, c.Nonce), c.TTL), c.Owner), c.Delay)
		dst = appendString(dst, c.Name)
		if v >= parentCodec {
			dst = u(dst, c.Parent)
		}
	case KindKeepAlive:
		dst = u(u(dst, c.Session), c.Floor)
	case KindCloseSession:
		dst = u(u(dst, c.Session), c.Floor)
	case KindAcquire:
		dst = u(u(u(dst, c.Session), c.Seq), c.Floor)
		dst = append(dst, boolByte(c.Wait))
		dst = u(appendString(dst, c.Name), c.MaxHold)
	case KindRelease:
		dst = u(u(u(u(dst, c.Session), c.Seq), c.Floor), c.Token)
		dst = appendString(dst, c.Name)
	case KindCancel:
		dst = u(u(u(dst, c.Session), c.Target), c.Floor)
		dst = append(dst, boolByte(c.Election))
		dst = appendString(dst, c.Name)
	case KindExpire:
		dst = u(u(u(dst, c.Session), c.Target), c.Mark)
	case KindCampaign:
		dst = u(u(u(dst, c.Session), c.Seq), c.Floor)
		dst = append(dst, boolByte(c.Wait))
		dst = u(appendString(appendString(dst, c.Name), c.Value), c.MaxHold)
	case KindResign:
		dst = u(u(u(u(dst, c.Session), c.Seq), c.Floor), c.Token)
		dst = appendString(dst, c.Name)
	case KindProclaim:
		dst = u(u(u(u(dst, c.Session), c.Seq), c.Floor), c.Token)
		dst = appendString(appendString(dst, c.Name), c.Value)
	case KindLeaderStart:
		dst = u(u(u(dst, c.Owner), c.Term), c.Nonce)
	case KindRevoke:
		dst = append(u(dst, c.Token), boolByte(c.Election))
		dst = u(appendString(dst, c.Name), c.Op)
	case KindEndSession:
		dst = u(u(dst, c.Session), c.Op)
	case KindResume:
		dst = u(u(u(u(u(dst, c.Session), c.Nonce), c.Owner), c.Target), c.TTL)
		dst = append(dst, boolByte(c.Keep))
		if v >= epochCodec {
			dst = append(dst, boolByte(c.Fence))
			if c.Fence {
				dst = u(u(dst, c.Epoch), c.Parent)
			}
		}
	case KindAcquireShared:
		dst = u(u(u(dst, c.Session), c.Seq), c.Floor)
		dst = append(dst, boolByte(c.Wait))
		dst = u(appendString(u(dst, c.Permits), c.Name), c.MaxHold)
	case KindUndelay:
		dst = appendString(u(u(dst, c.Token), c.Mark), c.Name)
	case KindExpireGrant:
		dst = append(u(u(dst, c.Token), c.Mark), boolByte(c.Election))
		dst = appendString(dst, c.Name)
	case KindGroupSeed, KindGroupCreate, KindGroupDrop, KindGroupSetVoters:
		dst = appendGroupCommand(dst, c)
	case KindKeepAliveBatch:
		dst = u(u(dst, c.Owner), uint64(len(c.Renew)))
		var prev uint64
		for _, r := range c.Renew {
			dst = u(u(dst, r.Session-prev), r.Floor)
			prev = r.Session
		}
	case KindGate:
		dst = u(u(dst, uint64(c.Gate.Codec)), uint64(c.Gate.Snapshot))
	case KindSeal:
		// The kind says it all.
	}
	return dst
}

// DecodeBatch decodes one entry, appending its commands to dst. Anything
// but a complete, well-formed entry is an error wrapping ErrCorrupt.
func DecodeBatch(data []byte, dst []Command) ([]Command, error) {
	d := decoder{b: data}
	v := d.byte()
	switch {
	case d.err != nil:
		return dst, d.err
	case v == 0:
		return dst, fmt.Errorf("%w: entry version 0", ErrCorrupt)
	case v > codecVersion:
		return dst, tooNewLog(uint64(v))
	}
	d.v1, d.version = v == 1, v
	if v >= 6 {
		d.at = d.uvarint()
	}
	n := d.uvarint()
	if n == 0 || n > MaxBatch {
		return dst, fmt.Errorf("%w: %d commands in an entry", ErrCorrupt, n)
	}
	for range n {
		var c Command
		d.command(&c)
		if d.err != nil {
			return dst, d.err
		}
		dst = append(dst, c)
	}
	if len(d.b) != 0 {
		return dst, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	return dst, nil
}

func (d *decoder) command(c *Command) {
	c.Kind = Kind(d.byte())
	c.v1, c.pre5, c.At = d.v1, d.version < 5, d.at
	switch need := MinCodec(c.Kind); {
	case d.err != nil:
		return
	case need == 0:
		d.fail("unknown command kind %d", c.Kind)
		return
	case int(d.version) < need:
		d.fail("command kind %d in a version-%d entry", c.Kind, d.version)
		return
	}
	switch c.Kind {
	case KindOpenSession:
		c.Nonce, c.TTL, c.Owner = d.uvarint(), d.uvarint(), d.uvarint()
		if d.version >= 3 {
			c.Delay = d.uvarint()
		}
		if d.version >= 6 {
			c.Name = d.string(MaxSessionNameLen, "session name")
		}
		if d.version >= parentCodec {
			c.Parent = d.uvarint()
		}
	case KindKeepAlive:
		c.Session, c.Floor = d.uvarint(), d.uvarint()
	case KindCloseSession:
		c.Session = d.uvarint()
		if d.version >= 3 {
			c.Floor = d.uvarint()
		}
	case KindAcquire:
		c.Session, c.Seq, c.Floor = d.uvarint(), d.uvarint(), d.uvarint()
		c.Wait = d.bool()
		c.Name = d.name()
		d.maxHold(c)
	case KindRelease:
		c.Session, c.Seq, c.Floor, c.Token = d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
		c.Name = d.name()
	case KindCancel:
		c.Session, c.Target, c.Floor = d.uvarint(), d.uvarint(), d.uvarint()
		c.Election = d.bool()
		c.Name = d.name()
	case KindExpire:
		c.Session, c.Target = d.uvarint(), d.uvarint()
		if !d.v1 {
			c.Mark = d.uvarint()
		}
	case KindCampaign:
		c.Session, c.Seq, c.Floor = d.uvarint(), d.uvarint(), d.uvarint()
		c.Wait = d.v1 || d.bool() // version 1 had only the waiting kind
		c.Name, c.Value = d.name(), d.value()
		d.maxHold(c)
	case KindResign:
		c.Session, c.Seq, c.Floor, c.Token = d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
		c.Name = d.name()
	case KindProclaim:
		c.Session, c.Seq, c.Floor, c.Token = d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
		c.Name, c.Value = d.name(), d.value()
	case KindLeaderStart:
		c.Owner, c.Term, c.Nonce = d.uvarint(), d.uvarint(), d.uvarint()
	case KindRevoke, KindEndSession:
		if c.Kind == KindRevoke {
			c.Token, c.Election, c.Name = d.uvarint(), d.bool(), d.name()
		} else {
			c.Session = d.uvarint()
		}
		if d.version >= 7 {
			c.Op = d.uvarint()
		}
	case KindResume:
		c.Session, c.Nonce, c.Owner, c.Target = d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
		if d.version >= 5 {
			c.TTL = d.uvarint()
		}
		if d.version >= 8 {
			c.Keep = d.bool()
		}
		if d.version >= epochCodec && d.bool() {
			c.Fence, c.Epoch, c.Parent = true, d.uvarint(), d.uvarint()
		}
	case KindAcquireShared:
		c.Session, c.Seq, c.Floor = d.uvarint(), d.uvarint(), d.uvarint()
		c.Wait = d.bool()
		c.Permits, c.Name = d.uvarint(), d.name()
		d.maxHold(c)
	case KindUndelay, KindExpireGrant:
		c.Token, c.Mark = d.uvarint(), d.uvarint()
		if c.Kind == KindExpireGrant {
			c.Election = d.bool()
		}
		c.Name = d.name()
	case KindKeepAliveBatch:
		d.renewals(c)
	case KindGate:
		d.gate(c)
	case KindSeal:
	case KindGroupSeed, KindGroupCreate, KindGroupDrop, KindGroupSetVoters:
		d.groupCommand(c)
	default:
		d.fail("unknown command kind %d", c.Kind)
	}
}

// gate reads a KindGate's versions. One this build does not read stops the
// decoding with ErrVersionTooNew, not ErrCorrupt: the group writes them,
// and this replica cannot follow it.
func (d *decoder) gate(c *Command) {
	codec, snap := d.uvarint(), d.uvarint()
	if d.err != nil {
		return
	}
	switch {
	case codec > codecVersion:
		d.err, d.b = tooNewLog(codec), nil
	case snap > snapshotVersion:
		d.err, d.b = tooNewSnapshot(snap), nil
	default:
		c.Gate = Gate{Codec: int(codec), Snapshot: int(snap)}
	}
}

// renewals reads a KeepAliveBatch's owner and sessions, whose IDs must
// strictly ascend: a batch names each session once.
func (d *decoder) renewals(c *Command) {
	c.Owner = d.uvarint()
	n := d.uvarint()
	if d.err != nil {
		return
	}
	// Each renewal takes two bytes at least: a count beyond that is a lie
	// to allocate on.
	if n == 0 || n > MaxRenewals || n > uint64(len(d.b))/2 {
		d.fail("%d renewals in a keep-alive batch", n)
		return
	}
	c.Renew = make([]Renewal, n)
	var id uint64
	for i := range c.Renew {
		delta, floor := d.uvarint(), d.uvarint()
		if d.err != nil {
			return
		}
		if delta == 0 || id+delta < id {
			d.fail("keep-alive batch session IDs do not ascend")
			return
		}
		id += delta
		c.Renew[i] = Renewal{Session: id, Floor: floor}
	}
}

// maxHold reads a request's maximum hold, from version 3 on.
func (d *decoder) maxHold(c *Command) {
	if d.version >= 3 {
		c.MaxHold = d.uvarint()
	}
}

// AppendResults appends the encoding of rs to dst.
func AppendResults(dst []byte, rs []Result) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(rs)))
	for _, r := range rs {
		dst = append(dst, byte(r.Status))
		dst = binary.AppendUvarint(dst, r.Value)
		if r.Status == Refused {
			for _, id := range r.Refused {
				dst = binary.AppendUvarint(dst, id)
			}
		}
	}
	return dst
}

// DecodeResults decodes a result list, appending to dst.
func DecodeResults(data []byte, dst []Result) ([]Result, error) {
	d := decoder{b: data}
	n := d.uvarint()
	if d.err != nil {
		return dst, d.err
	}
	if n > MaxBatch {
		return dst, fmt.Errorf("%w: %d results", ErrCorrupt, n)
	}
	for range n {
		r := Result{Status: Status(d.byte()), Value: d.uvarint()}
		if r.Status == Refused && d.err == nil {
			if r.Value > MaxRenewals || r.Value > uint64(len(d.b)) {
				return dst, fmt.Errorf("%w: %d refused sessions", ErrCorrupt, r.Value)
			}
			r.Refused = make([]uint64, r.Value)
			for i := range r.Refused {
				r.Refused[i] = d.uvarint()
			}
		}
		if d.err != nil {
			return dst, d.err
		}
		dst = append(dst, r)
	}
	if len(d.b) != 0 {
		return dst, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	return dst, nil
}

// decoder reads from b; the first failure sticks in err and later reads
// return zero values, so callers check err once per record.
type decoder struct {
	b       []byte
	err     error
	v1      bool   // decoding a version-1 entry
	version byte   // the entry's version
	at      uint64 // the entry's time (version 6)
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("unexpected end")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad flag")
	return false
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// name reads a length-prefixed string of at most MaxNameLen bytes. Whether
// it is a valid lock name is Apply's business, so that a bad name fails one
// command, not its whole entry.
func (d *decoder) name() string { return d.string(MaxNameLen, "name") }

// value reads a leader's value: a length-prefixed string of at most
// MaxValueLen bytes.
func (d *decoder) value() string { return d.string(MaxValueLen, "value") }

func (d *decoder) string(limit uint64, what string) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > limit || n > uint64(len(d.b)) {
		d.fail("%s of %d bytes", what, n)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
