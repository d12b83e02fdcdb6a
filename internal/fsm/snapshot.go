package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// The snapshot format (version 9), all numbers unsigned varints:
//
//	snapshot = magic version index lastToken lastSession grants leaderMark groupID
//	           gateCodec gateSnapshot sealed:byte
//	           sessions:count session*  locks:count lock*
//	           elections:count election*  ops:count (op status value)*
//	           table  crc32:4 bytes
//	session  = id nonce ttl owner keepAlive floor base resumed delay name parent epoch
//	           replies:count (seq status value)*
//	lock     = name permits shared:byte delay [delayToken, if delay > 0]
//	           holders:count (session seq token maxHold at)*
//	           queue:count (session seq shared:byte maxHold at)*
//	election = name holder seq token maxHold at value
//	           queue:count (session seq value maxHold at)*
//
// Names and values are a varint length and their bytes. Sessions are ordered
// by ID, replies by seq, a lock's holders by token, locks and elections by
// their (oldest) grant's token (a delayed lock nobody holds by its
// delayToken), and the remembered operator commands (see OpMemory) in the
// order they applied, oldest first, so equal states have equal snapshots on
// every replica; Restore accepts any order of sessions, locks and elections
// (the order of the operations is the order they are forgotten in).
// The trailing CRC-32 covers everything before it. The table is the group
// table (grouptable.go), which version 7 added: older snapshots restore with
// none, never set.
//
// A state is saved at its group's gate (State.Gate): version 9 once the
// gate's snapshot version is 9, version 8 (the same but for the parts'
// ownership epochs, which it restores as 0, none: see Command.Fence, and
// the seal, which it restores as unsealed: only a group whose gate is 11,
// and so writes version 9, seals: see KindSeal)
// while it is 8, version 7 (version 8 but for the sessions'
// parents, which it restores as 0, unknown: see Command.Parent) while it
// is 7, version 6 (version 7 but for the gate, which
// it restores as Baseline) while the gate is the baseline, which every
// replica that announces nothing reads; a snapshot of a version this build
// does not restore is refused with ErrVersionTooNew. Versions 1 to 6 are
// still read: version 6 had no gate (it restores as Baseline: a group
// writing version 6 snapshots had never raised it); version 5 had no
// remembered operations (they restore as
// none: every command of a log of its day carried no operation ID);
// version 4 had no session names and no times of grants and
// queued requests (they restore as "" and 0, unknown, as the log of its
// day applies them); version 3 had no session base, resumed and delay, no lock
// delay and no maximum holds (they restore as 0: no session was ever
// resumed, nothing is delayed or bounded) and wrote a lock as an election without its value (one
// exclusive holder, name holder seq token queue:count (session seq)*: it
// restores as a lock, permits 0, with exclusive waiters), version 2 had
// neither leaderMark nor groupID (they restore as 0: the first leader's
// expiries wait for its own mark, and its LeaderStart sets the ID),
// version 1 neither grants nor elections.
var snapshotMagic = [4]byte{'F', 'L', 'S', 'N'}

const snapshotVersion = 9

// parentSnapshot is the first snapshot version that keeps a session's
// parent (Command.Parent).
const parentSnapshot = 8

// epochSnapshot is the first snapshot version that keeps a part's
// ownership epoch (Command.Fence).
const epochSnapshot = 9

// sealSnapshot is the first snapshot version that keeps a group's seal
// (KindSeal).
const sealSnapshot = 9

// maxSnapshot bounds how much Restore reads, so a corrupt or hostile stream
// cannot make a replica allocate without limit.
const maxSnapshot int64 = 4 << 30

// maxIndex bounds the log index and counters a snapshot may hold: the token
// of a grant at index i is i<<TokenShift, which must not overflow. No real
// log comes near it (2^48 entries).
const maxIndex = 1 << (64 - TokenShift)

// Save writes the whole state to w, at the snapshot version of the
// group's gate (see above).
func (st *State) Save(w io.Writer) error {
	crc := crc32.NewIEEE()
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	u := binary.AppendUvarint
	v := uint64(min(st.gate.Snapshot, snapshotVersion))
	buf := append(snapshotMagic[:0:0], snapshotMagic[:]...)
	buf = u(u(u(u(u(buf, v), st.index), st.lastToken), st.lastSession), st.grants)
	buf = u(u(buf, st.leaderMark), st.groupID)
	if v >= gateSnapshot {
		buf = u(u(buf, uint64(st.gate.Codec)), uint64(st.gate.Snapshot))
	}
	if v >= sealSnapshot {
		buf = append(buf, boolByte(st.sealed))
	}

	ids := make([]uint64, 0, len(st.sessions))
	for id := range st.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	buf = u(buf, uint64(len(ids)))
	seqs := []uint64{}
	for _, id := range ids {
		s := st.sessions[id]
		buf = u(u(u(u(u(u(u(u(buf, s.id), s.nonce), s.ttl), s.owner), s.keepAlive), s.floor), s.base), s.resumed)
		buf = appendString(u(buf, s.delay), s.name)
		if v >= parentSnapshot {
			buf = u(buf, s.parent)
		}
		if v >= epochSnapshot {
			buf = u(buf, s.epoch)
		}
		seqs = seqs[:0]
		for seq := range s.replies {
			seqs = append(seqs, seq)
		}
		slices.Sort(seqs)
		buf = u(buf, uint64(len(seqs)))
		for _, seq := range seqs {
			r := s.replies[seq]
			buf = u(append(u(buf, seq), byte(r.Status)), r.Value)
		}
		var err error
		if buf, err = flushIfFull(bw, buf); err != nil {
			return err
		}
	}

	for _, table := range []*lockTable{st.locks, st.elections} {
		// Ordered by the oldest grant's token (unique: every lock in a table
		// is held, or delayed, with a token of its own): sorting integers
		// rather than names is what makes saving a million locks fast.
		byToken := make([]*lock, 0, table.len())
		for l := range table.all {
			byToken = append(byToken, l)
		}
		slices.SortFunc(byToken, func(a, b *lock) int { return cmpUint(a.key(), b.key()) })
		buf = u(buf, uint64(len(byToken)))
		for _, l := range byToken {
			buf = appendString(buf, l.name)
			if l.election {
				h := l.oldest()
				buf = u(u(u(u(u(buf, h.s.id), h.seq), h.token), h.maxHold()), h.at)
				buf = appendString(buf, l.value())
			} else {
				delay, token := l.delay()
				buf = u(append(u(buf, l.permits()), boolByte(l.shared)), delay)
				if delay != 0 {
					buf = u(buf, token)
				}
				buf = u(buf, uint64(l.holders.n))
				for h := range l.grants {
					buf = u(u(u(u(u(buf, h.s.id), h.seq), h.token), h.maxHold()), h.at)
				}
			}
			buf = u(buf, uint64(l.waiters()))
			for w := range l.queued {
				buf = u(u(buf, w.s.id), w.seq)
				if l.election {
					buf = appendString(buf, w.value)
				} else {
					buf = append(buf, boolByte(w.shared))
				}
				buf = u(u(buf, w.maxHold), w.at)
			}
			var err error
			if buf, err = flushIfFull(bw, buf); err != nil {
				return err
			}
		}
	}
	buf = u(buf, uint64(st.ops.len()))
	for op, r := range st.ops.all {
		buf = u(append(u(buf, op), byte(r.Status)), r.Value)
	}
	if v >= 7 { // a table is set only by version-9 commands, which a gate below 9/7 refuses
		buf = appendGroupTable(buf, st)
	}
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(crc.Sum(nil))
	return err
}

func flushIfFull(w io.Writer, buf []byte) ([]byte, error) {
	if len(buf) < 32<<10 {
		return buf, nil
	}
	_, err := w.Write(buf)
	return buf[:0], err
}

// Restore reads a snapshot written by Save into a new State. It decodes the
// stream record by record as it reads it, through a small buffer, so that
// restoring costs the new state and little more: never a copy of the whole
// snapshot. A stream that is truncated, corrupt or inconsistent is an error
// wrapping ErrCorrupt, and one that fails to read returns the reader's
// error; either way no State is returned, and the caller's state is never
// touched.
//
// The checksum trails the snapshot, so it is checked only once everything
// before it has been decoded: a corrupt snapshot may fail on the content it
// garbles rather than on the checksum, but it fails either way (it takes the
// same bytes, a body that parses exactly and its checksum, to succeed).
func Restore(r io.Reader) (*State, error) {
	d := newSnapDecoder(r)
	v, err := d.head()
	if err != nil {
		return nil, err
	}
	st := New()
	st.index, st.lastToken, st.lastSession = d.uvarint(), d.uvarint(), d.uvarint()
	if d.err == nil && (st.index >= maxIndex || st.lastToken >= 1<<63 || st.lastSession >= 1<<63) {
		d.fail("counters out of range")
	}
	if v >= 2 {
		st.grants = d.uvarint()
	}
	if v >= 3 {
		st.leaderMark, st.groupID = d.uvarint(), d.uvarint()
		if d.err == nil && st.leaderMark > st.index {
			d.fail("leader mark %d beyond index %d", st.leaderMark, st.index)
		}
	}
	if v >= gateSnapshot {
		if err := d.gate(st, v); err != nil {
			return nil, err
		}
	}
	if v >= sealSnapshot {
		st.sealed = d.bool()
		if d.err == nil && st.sealed && st.gate.Codec < sealCodec {
			d.fail("a seal in a group whose gate is %v", st.gate)
		}
	}
	d.sessions(st, v)
	var tokens []uint64
	tokens = d.locks(st, tokens, false, v)
	if v >= 2 {
		tokens = d.locks(st, tokens, true, v)
	}
	if v >= 6 {
		d.ops(st)
	}
	if v >= 7 {
		d.groupTable(st)
	}
	d.checksum()
	d.uniqueTokens(tokens)
	d.uniqueRequests(st)
	if d.err == nil && st.sealed && st.waiting+st.campaigning > 0 {
		d.fail("a sealed group with %d queued requests", st.waiting+st.campaigning)
	}
	if d.err != nil {
		return nil, d.err
	}
	return st, nil
}

// gate reads the group's gate (version 7), which must be one the group may
// write and the snapshot's own version; one this build cannot honour is
// ErrVersionTooNew, returned rather than kept, since it is not corruption.
func (d *snapDecoder) gate(st *State, v uint64) error {
	codec, snap := d.uvarint(), d.uvarint()
	switch {
	case d.err != nil:
	case codec > codecVersion:
		return tooNewLog(codec)
	case snap != v:
		d.fail("gate of snapshot version %d in a version-%d snapshot", snap, v)
	default:
		st.gate = Gate{Codec: int(codec), Snapshot: int(snap)}
		if !st.gate.Valid() {
			d.fail("gate %v", st.gate)
		}
	}
	return nil
}

// DecodeSnapshot is Restore on a snapshot held in memory.
func DecodeSnapshot(data []byte) (*State, error) {
	return Restore(bytes.NewReader(data))
}

// snapBuffer is how much of the stream Restore holds at once. It must hold
// the longest record field read in one piece (a value of MaxValueLen bytes
// and its length).
const snapBuffer = 64 << 10

// maxPrealloc bounds what Restore allocates ahead on the word of a count it
// has not yet read the records of: a forged count in a short stream costs
// at most this many records' worth of memory before the stream runs out.
const maxPrealloc = 1 << 20

// slabLocks is how many locks Restore allocates at once: few allocations
// for a million locks, yet a slab's memory returns to the heap once the
// locks in it are gone, not only once every restored lock is.
const slabLocks = 256

// snapDecoder reads a snapshot from a stream; like decoder, its first
// failure sticks in err and later reads return zero values, so callers
// check err once per record. buf[pos:end] is what it has read and not yet
// decoded; sum is the checksum of everything decoded before buf[0].
type snapDecoder struct {
	r        io.Reader
	buf      []byte
	pos, end int
	sum      uint32
	read     int64 // bytes read from r
	eof      bool
	err      error
	ioErr    error // the reader's error, if that is what err is
}

func newSnapDecoder(r io.Reader) *snapDecoder {
	return &snapDecoder{r: r, buf: make([]byte, snapBuffer)}
}

func (d *snapDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	d.pos, d.end, d.eof = 0, 0, true
}

// fill tries to have at least need bytes buffered (need <= snapBuffer) and
// reports whether it has. It reads nothing once decoding has failed.
func (d *snapDecoder) fill(need int) bool {
	if d.end-d.pos >= need {
		return true
	}
	if d.err != nil || d.eof {
		return false
	}
	// What is decoded joins the checksum before the buffer slides over it.
	d.sum = crc32.Update(d.sum, crc32.IEEETable, d.buf[:d.pos])
	d.end = copy(d.buf, d.buf[d.pos:d.end])
	d.pos = 0
	for empty := 0; d.end < need; {
		n, err := d.r.Read(d.buf[d.end:])
		d.end += n
		d.read += int64(n)
		switch {
		case d.read > maxSnapshot:
			d.fail("snapshot larger than %d bytes", maxSnapshot)
			return false
		case err == io.EOF:
			d.eof = true
			return d.end >= need
		case err != nil:
			d.ioErr = err
			d.err = fmt.Errorf("fsm: read snapshot: %w", err)
			d.pos, d.end, d.eof = 0, 0, true
			return false
		case n > 0:
			empty = 0
		default:
			// io.Reader allows an empty read now and then, not forever.
			if empty++; empty >= 100 {
				d.ioErr = io.ErrNoProgress
				d.err = fmt.Errorf("fsm: read snapshot: %w", io.ErrNoProgress)
				d.pos, d.end, d.eof = 0, 0, true
				return false
			}
		}
	}
	return true
}

func (d *snapDecoder) byte() byte {
	if !d.fill(1) {
		d.fail("unexpected end")
		return 0
	}
	c := d.buf[d.pos]
	d.pos++
	return c
}

func (d *snapDecoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad flag")
	return false
}

func (d *snapDecoder) uvarint() uint64 {
	// A varint's first byte says whether it is the last: most are one byte,
	// and decoding them is the bulk of a restore.
	if d.pos < d.end && d.buf[d.pos] < 0x80 {
		c := d.buf[d.pos]
		d.pos++
		return uint64(c)
	}
	d.fill(binary.MaxVarintLen64) // at the end of the stream, fewer will do
	v, n := binary.Uvarint(d.buf[d.pos:d.end])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.pos += n
	return v
}

// head reads what every snapshot starts with, its magic and its version,
// and returns the version. A stream that is not a snapshot, or of version
// 0, fails with ErrCorrupt, one of a version this build does not restore
// with ErrVersionTooNew, and one that fails to read with the reader's
// error. A stream cut short within the version returns no error here: d
// keeps it, and the caller's next read returns it.
func (d *snapDecoder) head() (version uint64, err error) {
	var magic [len(snapshotMagic)]byte
	for i := range magic {
		magic[i] = d.byte()
	}
	if d.err != nil || magic != snapshotMagic {
		if d.ioErr != nil {
			return 0, d.err
		}
		return 0, fmt.Errorf("%w: not a snapshot", ErrCorrupt)
	}
	v := d.uvarint()
	switch {
	case d.err != nil:
	case v == 0:
		return 0, fmt.Errorf("%w: snapshot version 0", ErrCorrupt)
	case v > snapshotVersion:
		return 0, tooNewSnapshot(v)
	}
	return v, nil
}

func (d *snapDecoder) name() string  { return d.string(MaxNameLen, "name") }
func (d *snapDecoder) value() string { return d.string(MaxValueLen, "value") }

// string reads a length-prefixed string of at most limit bytes into an
// allocation of its own: a restored name lives as long as its lock and no
// longer, and pins nothing else.
func (d *snapDecoder) string(limit uint64, what string) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > limit || !d.fill(int(n)) {
		d.fail("%s of %d bytes", what, n)
		return ""
	}
	s := string(d.buf[d.pos : d.pos+int(n)])
	d.pos += int(n)
	return s
}

// count reads a record count. Every record takes at least one byte, so the
// loops a count drives end with the stream; what is allocated ahead for
// them is bounded by maxPrealloc (see prealloc).
func (d *snapDecoder) count() uint64 {
	n := d.uvarint()
	if d.err == nil && n > uint64(maxSnapshot) {
		d.fail("count %d exceeds the largest snapshot", n)
		return 0
	}
	return n
}

func prealloc(n uint64) int { return int(min(n, maxPrealloc)) }

// checksum reads the trailing checksum of what was decoded, and the end of
// the stream that must follow it.
func (d *snapDecoder) checksum() {
	if d.err != nil {
		return
	}
	sum := crc32.Update(d.sum, crc32.IEEETable, d.buf[:d.pos])
	var b [4]byte
	for i := range b {
		b[i] = d.byte()
	}
	switch {
	case d.err != nil:
	case binary.BigEndian.Uint32(b[:]) != sum:
		d.fail("snapshot checksum mismatch")
	case d.fill(1):
		d.fail("trailing bytes after the checksum")
	}
}

// uniqueTokens checks that no two grants share a token: tokens come from
// one strictly rising sequence. Save writes each table in token order, and
// sorting runs that are already sorted takes linear time.
func (d *snapDecoder) uniqueTokens(tokens []uint64) {
	if d.err != nil {
		return
	}
	slices.Sort(tokens)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] == tokens[i-1] {
			d.fail("two grants share token %d", tokens[i])
			return
		}
	}
}

func (d *snapDecoder) sessions(st *State, v uint64) {
	n := d.count()
	for range n {
		s := &session{id: d.uvarint(), nonce: d.uvarint(), ttl: d.uvarint(),
			owner: d.uvarint(), keepAlive: d.uvarint(), floor: d.uvarint()}
		if v >= 4 {
			s.base, s.resumed, s.delay = d.uvarint(), d.uvarint(), d.uvarint()
		}
		if v >= 5 {
			s.name = d.string(MaxSessionNameLen, "session name")
		}
		if v >= parentSnapshot {
			s.parent = d.uvarint()
		}
		if v >= epochSnapshot {
			s.epoch = d.uvarint()
		}
		switch {
		case d.err != nil:
			return
		case s.id == 0 || s.id > st.lastSession || st.sessions[s.id] != nil:
			d.fail("bad session id %d", s.id)
		case s.nonce == 0 || st.nonces[s.nonce] != nil:
			d.fail("bad nonce in session %d", s.id)
		case s.ttl == 0 || s.keepAlive > st.index:
			d.fail("bad ttl or keep-alive in session %d", s.id)
		case s.base > s.floor:
			d.fail("base %d above floor %d in session %d", s.base, s.floor, s.id)
		case s.delay > MaxLockDelay:
			d.fail("lock-delay %d in session %d", s.delay, s.id)
		case !ValidSessionName(s.name):
			d.fail("bad name of session %d", s.id)
		}
		if d.err != nil {
			return
		}
		st.addSession(s)
		for range d.count() {
			seq, status, value := d.uvarint(), Status(d.byte()), d.uvarint()
			if d.err == nil && (seq < s.floor || !status.valid() || status == Refused || s.replies[seq].Status != 0) {
				d.fail("bad reply %d in session %d", seq, s.id)
			}
			if d.err != nil {
				return
			}
			s.replies[seq] = Result{Status: status, Value: value}
		}
	}
}

// ops reads the remembered operator commands (version 6), oldest first:
// at most OpMemory, each ID once and none 0, each with a valid status.
func (d *snapDecoder) ops(st *State) {
	n := d.count()
	if d.err == nil && n > OpMemory {
		d.fail("%d remembered operations", n)
	}
	for range n {
		op, status, value := d.uvarint(), Status(d.byte()), d.uvarint()
		if d.err != nil {
			return
		}
		if _, dup := st.ops.result(op); op == 0 || dup || !status.valid() || status == Refused {
			d.fail("bad remembered operation %d", op)
			return
		}
		st.ops.remember(op, Result{Status: status, Value: value})
	}
}

// locks reads the locks, or the elections, of a snapshot of version v,
// appending their tokens.
func (d *snapDecoder) locks(st *State, tokens []uint64, elections bool, v uint64) []uint64 {
	table := st.locks
	if elections {
		table = st.elections
	}
	n := d.count()
	if n == 0 {
		return tokens
	}
	if tokens == nil {
		tokens = make([]uint64, 0, prealloc(n))
	}
	if table.len() == 0 {
		table = newLockTable(prealloc(n))
		if elections {
			st.elections = table
		} else {
			st.locks = table
		}
	}
	// Before version 4 a lock was written as an election without a value.
	shared := !elections && v >= 4
	var slab []lock
	for i := range n {
		if len(slab) == 0 {
			slab = make([]lock, min(n-i, slabLocks))
		}
		l := &slab[0]
		slab = slab[1:]
		l.name, l.election = d.name(), elections
		holders := uint64(1)
		var permits, delay, delayToken uint64
		if shared {
			permits, l.shared, delay = d.uvarint(), d.bool(), d.uvarint()
			if delay != 0 {
				delayToken = d.uvarint()
				tokens = append(tokens, delayToken)
			}
			holders = d.count()
		}
		if permits != 0 {
			l.ensure().permits = permits
		}
		l.setDelay(delay, delayToken)
		if d.err != nil {
			return tokens
		}
		switch {
		case !table.add(l) || !ValidName(l.name): // one lookup: a duplicate is not added
			d.fail("bad lock name %q", l.name)
		case delay > MaxLockDelay || (delay != 0 && (delayToken == 0 || delayToken > st.lastToken)):
			d.fail("lock %q: bad delay %d (token %d)", l.name, delay, delayToken)
		case holders == 0 && delay == 0:
			d.fail("lock %q is free", l.name)
		case (holders > 1 || permits > 0) && !l.shared:
			d.fail("lock %q has %d exclusive holders", l.name, holders)
		}
		for range holders {
			if tokens = d.hold(st, l, tokens, v); d.err != nil {
				return tokens
			}
		}
		if elections {
			l.setValue(d.value())
		}
		if d.err != nil {
			return tokens
		}
		for range d.count() {
			w := &waiter{s: st.sessions[d.uvarint()], seq: d.uvarint()}
			if elections {
				w.value = d.value()
			} else if shared {
				w.shared = d.bool()
			}
			if v >= 4 {
				w.maxHold = d.uvarint()
			}
			if v >= 5 {
				w.at = d.uvarint()
			}
			switch {
			case d.err != nil:
			case w.s == nil: // before anything that names the session
				d.fail("waiter of unknown session in lock %q", l.name)
			case w.maxHold > MaxHoldLimit:
				d.fail("request %d of session %d: maximum hold %d", w.seq, w.s.id, w.maxHold)
			case w.s.queued(w.seq) != nil:
				d.fail("request %d of session %d waits twice", w.seq, w.s.id)
			case permits > 0 && !w.shared:
				d.fail("exclusive waiter in semaphore %q", l.name)
			case l.waiters() == 0 && l.admits(w.shared):
				d.fail("lock %q admits its queue's head", l.name)
			}
			if d.err != nil {
				return tokens
			}
			st.enqueue(l, w)
			if elections {
				w.s.campaigns[w.seq] = w
				st.campaigning++
			} else {
				w.s.waits[w.seq] = w
				st.waiting++
			}
		}
	}
	return tokens
}

// hold reads one grant of lock l, appending its token. A lock's grants
// come in token order.
func (d *snapDecoder) hold(st *State, l *lock, tokens []uint64, v uint64) []uint64 {
	holder, seq, token := d.uvarint(), d.uvarint(), d.uvarint()
	var maxHold, at uint64
	if v >= 4 {
		maxHold = d.uvarint()
	}
	if v >= 5 {
		at = d.uvarint()
	}
	if d.err != nil {
		return tokens
	}
	s := st.sessions[holder]
	switch {
	case s == nil:
		d.fail("lock %q held by unknown session %d", l.name, holder)
	case token == 0 || token > st.lastToken:
		d.fail("lock %q has token %d beyond the last %d", l.name, token, st.lastToken)
	case l.holders.n > 0 && token <= (*hold)(l.holders.tail).token:
		d.fail("lock %q: grants out of token order", l.name)
	case maxHold > MaxHoldLimit:
		d.fail("lock %q: maximum hold %d", l.name, maxHold)
	}
	if d.err != nil {
		return tokens
	}
	h := &l.first
	if h.s != nil {
		h = new(hold)
	}
	*h = hold{l: l, s: s, seq: seq, token: token, at: at}
	h.setMaxHold(maxHold)
	l.holders.push((*peerHold)(h))
	if l.election {
		s.leads.push(h)
	} else {
		s.held.push(h)
	}
	return append(tokens, token)
}

// uniqueRequests checks that no request of a session both holds and waits,
// or holds twice. Checking per session, once everything is read, keeps it
// cheap for a million locks (a map of every request would cost as much as
// the rest of the restore).
func (d *snapDecoder) uniqueRequests(st *State) {
	if d.err != nil {
		return
	}
	var seqs []uint64
	for _, s := range st.sessions {
		seqs = seqs[:0]
		for _, list := range []*heldList{&s.held, &s.leads} {
			for h := range list.all {
				if s.queued(h.seq) != nil {
					d.fail("request %d of session %d holds and waits", h.seq, s.id)
					return
				}
				seqs = append(seqs, h.seq)
			}
		}
		for seq := range s.waits {
			if s.campaigns[seq] != nil {
				d.fail("request %d of session %d waits twice", seq, s.id)
				return
			}
		}
		slices.Sort(seqs)
		for i := 1; i < len(seqs); i++ {
			if seqs[i] == seqs[i-1] {
				d.fail("request %d of session %d holds twice", seqs[i], s.id)
				return
			}
		}
	}
}
