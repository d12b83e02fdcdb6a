package fsm

// This file keeps, for the tests only, the snapshot decoder as it was before
// Restore read its stream record by record: it held the whole snapshot in
// memory, checked the checksum first and took names as substrings of one
// copy of it. FuzzRestoreStream decodes every input both ways and requires
// the same verdict and the same state, which is what "the format did not
// change" means for inputs no golden file holds. Do not change it to match
// Restore: it is the reference.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
)

// refDecodeSnapshot is the in-memory decoder that Restore replaced.
func refDecodeSnapshot(data []byte) (*State, error) {
	if len(data) < len(snapshotMagic)+4 || !strings.HasPrefix(string(data), string(snapshotMagic[:])) {
		return nil, fmt.Errorf("%w: not a snapshot", ErrCorrupt)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%w: snapshot checksum mismatch", ErrCorrupt)
	}
	// The names of the restored locks share one copy of the snapshot
	// instead of an allocation each; it stays in memory while any of them
	// does, at most the size of the snapshot.
	rest := body[len(snapshotMagic):]
	d := refDecoder{b: rest, text: string(rest)}
	v := d.uvarint()
	if v == 0 || v > snapshotVersion {
		return nil, fmt.Errorf("%w: snapshot version %d", ErrCorrupt, v)
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
	if v >= 7 {
		d.gate(st, v)
	}
	if v >= 9 { // like the gate, a field the format gained since
		st.sealed = d.bool()
		if d.err == nil && st.sealed && st.gate.Codec < 11 {
			d.fail("a seal at gate %v", st.gate)
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
		// The group table, version 7's section: its reading is the
		// stream's own (readGroupTable), fed from memory here.
		if t, ok := readGroupTable(&d, st.index); ok {
			st.table = t
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	d.uniqueTokens(tokens)
	d.uniqueRequests(st)
	if d.err == nil && st.sealed && st.waiting+st.campaigning > 0 {
		d.fail("a sealed group with queued requests")
	}
	if d.err != nil {
		return nil, d.err
	}
	return st, nil
}

// gate reads the group's gate of snapshot version 7, which the format
// gained since Restore replaced this decoder; a gate this build cannot
// honour is an error as Restore's is (it is checked before the checksum
// there, after it here: the verdicts agree, not their words).
func (d *refDecoder) gate(st *State, v uint64) {
	codec, snap := d.uvarint(), d.uvarint()
	if d.err != nil {
		return
	}
	st.gate = Gate{Codec: int(min(codec, 1<<20)), Snapshot: int(min(snap, 1<<20))}
	switch {
	case codec > codecVersion:
		d.err, d.b = tooNewLog(codec), nil
	case snap != v || !st.gate.Valid():
		d.fail("bad gate %v in a version-%d snapshot", st.gate, v)
	}
}

// ops reads the remembered operator commands of snapshot version 6, one
// of the sections the format gained since Restore replaced this decoder.
func (d *refDecoder) ops(st *State) {
	n := d.count()
	if d.err == nil && n > OpMemory {
		d.fail("%d remembered operations", n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		op, status, value := d.uvarint(), Status(d.byte()), d.uvarint()
		if d.err != nil {
			return
		}
		if _, dup := st.ops.results[op]; op == 0 || dup || !status.valid() || status == Refused {
			d.fail("bad remembered operation %d", op)
			return
		}
		st.ops.remember(op, Result{Status: status, Value: value})
	}
}

// uniqueTokens checks that no two grants share a token: tokens come from
// one strictly rising sequence. Save writes each table in token order, and
// sorting runs that are already sorted takes linear time.
func (d *refDecoder) uniqueTokens(tokens []uint64) {
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

func (d *refDecoder) sessions(st *State, v uint64) {
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
		if v >= 8 { // a field the format gained since, like ops and the gate
			s.parent = d.uvarint()
		}
		if v >= 9 {
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

// locks reads the locks, or the elections, of a snapshot of version v,
// appending their tokens.
func (d *refDecoder) locks(st *State, tokens []uint64, elections bool, v uint64) []uint64 {
	table := st.locks
	if elections {
		table = st.elections
	}
	n := d.count()
	if n == 0 {
		return tokens
	}
	if tokens == nil {
		tokens = make([]uint64, 0, n)
	}
	// Before version 4 a lock was written as an election without a value.
	shared := !elections && v >= 4
	// One allocation for all the locks (count bounded n by the bytes left);
	// its memory returns once every lock restored here is freed.
	slab := make([]lock, n)
	for i := range n {
		l := &slab[i]
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
		case !table.add(l) || !ValidName(l.name):
			d.fail("bad lock name %q", l.name)
		case delay > MaxLockDelay || (delay != 0 && (delayToken == 0 || delayToken > st.lastToken)):
			d.fail("lock %q: bad delay %d (token %d)", l.name, delay, delayToken)
		case holders == 0 && delay == 0:
			d.fail("lock %q is free", l.name)
		case (holders > 1 || permits > 0) && !l.shared:
			d.fail("lock %q has %d exclusive holders", l.name, holders)
		}
		for range holders {
			tokens = d.hold(st, l, tokens, v)
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
func (d *refDecoder) hold(st *State, l *lock, tokens []uint64, v uint64) []uint64 {
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
func (d *refDecoder) uniqueRequests(st *State) {
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

// count reads a record count. Every record takes at least one byte, so a
// count beyond the remaining bytes is corrupt; checking it first keeps a
// forged count from driving a long loop.
func (d *refDecoder) count() uint64 {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("count %d exceeds the remaining %d bytes", n, len(d.b))
		return 0
	}
	return n
}

// refDecoder reads from b; the first failure sticks in err and later reads
// return zero values, so callers check err once per record.
type refDecoder struct {
	b   []byte
	err error
	// text, if set, holds the same bytes as the input b started with, as a
	// string: names are then substrings of it instead of one allocation
	// each (snapshot restore: a million locks, a million names).
	text string
}

func (d *refDecoder) failed() bool { return d.err != nil }

func (d *refDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	d.b = nil
}

func (d *refDecoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("unexpected end")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *refDecoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad flag")
	return false
}

func (d *refDecoder) uvarint() uint64 {
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
func (d *refDecoder) name() string { return d.string(MaxNameLen, "name") }

// value reads a leader's value: a length-prefixed string of at most
// MaxValueLen bytes.
func (d *refDecoder) value() string { return d.string(MaxValueLen, "value") }

func (d *refDecoder) string(limit uint64, what string) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > limit || n > uint64(len(d.b)) {
		d.fail("%s of %d bytes", what, n)
		return ""
	}
	var s string
	if d.text != "" {
		off := len(d.text) - len(d.b)
		s = d.text[off : off+int(n)]
	} else {
		s = string(d.b[:n])
	}
	d.b = d.b[n:]
	return s
}
