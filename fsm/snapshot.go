package fsm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
)

// The snapshot format (version 1), all numbers unsigned varints:
//
//	snapshot = magic version index lastToken lastSession
//	           sessions:count session*  locks:count lock*  crc32:4 bytes
//	session  = id nonce ttl owner keepAlive floor replies:count (seq status value)*
//	lock     = name holder seq token queue:count (session seq)*
//
// Sessions are ordered by ID, replies by seq and locks by their grant's
// token (unique, since every lock in the table is held), so equal states have
// equal snapshots on every replica. Restore accepts any order. Ordering by
// token rather than name sorts integers instead of strings: with a million
// locks, Save spends most of its time sorting. The trailing CRC-32 covers
// everything before it.
var snapshotMagic = [4]byte{'F', 'L', 'S', 'N'}

const snapshotVersion = 1

// maxSnapshot bounds how much Restore reads, so a corrupt or hostile stream
// cannot make a replica allocate without limit.
const maxSnapshot = 4 << 30

// Save writes the whole state to w.
func (st *State) Save(w io.Writer) error {
	crc := crc32.NewIEEE()
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	u := binary.AppendUvarint
	buf := append(snapshotMagic[:0:0], snapshotMagic[:]...)
	buf = u(u(u(u(buf, snapshotVersion), st.index), st.lastToken), st.lastSession)

	ids := make([]uint64, 0, len(st.sessions))
	for id := range st.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	buf = u(buf, uint64(len(ids)))
	seqs := []uint64{}
	for _, id := range ids {
		s := st.sessions[id]
		buf = u(u(u(u(u(u(buf, s.id), s.nonce), s.ttl), s.owner), s.keepAlive), s.floor)
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

	type byToken struct {
		token uint64
		l     *lock
	}
	locks := make([]byToken, 0, len(st.locks))
	for _, l := range st.locks {
		locks = append(locks, byToken{l.token, l})
	}
	slices.SortFunc(locks, func(a, b byToken) int { return cmpUint(a.token, b.token) })
	buf = u(buf, uint64(len(locks)))
	for _, bt := range locks {
		l := bt.l
		buf = appendString(buf, l.name)
		buf = u(u(u(buf, l.holder.id), l.seq), l.token)
		buf = u(buf, uint64(l.queued))
		for w := l.head; w != nil; w = w.next {
			buf = u(u(buf, w.s.id), w.seq)
		}
		var err error
		if buf, err = flushIfFull(bw, buf); err != nil {
			return err
		}
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

// Restore reads a snapshot written by Save into a new State. A stream that is
// truncated, corrupt or inconsistent is an error wrapping ErrCorrupt; the
// caller's state is never touched.
func Restore(r io.Reader) (*State, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxSnapshot+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSnapshot {
		return nil, fmt.Errorf("%w: snapshot larger than %d bytes", ErrCorrupt, maxSnapshot)
	}
	return DecodeSnapshot(data)
}

// DecodeSnapshot is Restore on a snapshot held in memory.
func DecodeSnapshot(data []byte) (*State, error) {
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
	d := decoder{b: rest, text: string(rest)}
	if v := d.uvarint(); v != snapshotVersion {
		return nil, fmt.Errorf("%w: snapshot version %d", ErrCorrupt, v)
	}
	st := New()
	st.index, st.lastToken, st.lastSession = d.uvarint(), d.uvarint(), d.uvarint()
	d.sessions(st)
	d.locks(st)
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return st, nil
}

func (d *decoder) sessions(st *State) {
	n := d.count()
	if n > 0 {
		st.sessions = make(map[uint64]*session, n)
		st.nonces = make(map[uint64]*session, n)
	}
	for range n {
		s := &session{id: d.uvarint(), nonce: d.uvarint(), ttl: d.uvarint(),
			owner: d.uvarint(), keepAlive: d.uvarint(), floor: d.uvarint()}
		switch {
		case d.err != nil:
			return
		case s.id == 0 || s.id > st.lastSession || st.sessions[s.id] != nil:
			d.fail("bad session id %d", s.id)
		case s.nonce == 0 || st.nonces[s.nonce] != nil:
			d.fail("bad nonce in session %d", s.id)
		case s.ttl == 0 || s.keepAlive > st.index:
			d.fail("bad ttl or keep-alive in session %d", s.id)
		}
		if d.err != nil {
			return
		}
		st.addSession(s)
		for range d.count() {
			seq, status, value := d.uvarint(), Status(d.byte()), d.uvarint()
			if d.err == nil && (seq < s.floor || !status.valid() || s.replies[seq] != (Result{})) {
				d.fail("bad reply %d in session %d", seq, s.id)
			}
			if d.err != nil {
				return
			}
			s.replies[seq] = Result{Status: status, Value: value}
		}
	}
}

func (d *decoder) locks(st *State) {
	n := d.count()
	var slab []lock
	if n > 0 {
		st.locks = make(map[string]*lock, n) // count() bounded n by the bytes left
		// One allocation for all locks; a freed lock's memory returns
		// with the slab, once every lock restored here is freed.
		slab = make([]lock, n)
	}
	for i := range n {
		l := &slab[i]
		l.name = d.name()
		holder, seq, token := d.uvarint(), d.uvarint(), d.uvarint()
		if d.err != nil {
			return
		}
		h := st.sessions[holder]
		before := len(st.locks)
		st.locks[l.name] = l // one map operation: a duplicate leaves the length unchanged
		switch {
		case !ValidName(l.name) || len(st.locks) == before:
			d.fail("bad lock name %q", l.name)
		case h == nil:
			d.fail("lock %q held by unknown session %d", l.name, holder)
		case token == 0 || token > st.lastToken:
			d.fail("lock %q has token %d beyond the last %d", l.name, token, st.lastToken)
		}
		if d.err != nil {
			return
		}
		l.holder, l.seq, l.token = h, seq, token
		h.held.add(l)
		for range d.count() {
			s, seq := st.sessions[d.uvarint()], d.uvarint()
			switch {
			case d.err != nil:
			case s == nil:
				d.fail("waiter of unknown session in lock %q", l.name)
			case s.waits[seq] != nil:
				d.fail("request %d of session %d waits twice", seq, s.id)
			}
			if d.err != nil {
				return
			}
			w := &waiter{s: s, seq: seq}
			l.push(w)
			s.waits[seq] = w
			st.waiting++
		}
	}
	d.uniqueRequests(st)
}

// uniqueRequests checks that no request of a session both holds and waits,
// or holds two locks. Checking per session, once all locks are read, keeps
// the check cheap for a million locks (a map of every request would cost as
// much as the rest of the restore).
func (d *decoder) uniqueRequests(st *State) {
	var seqs []uint64
	for _, s := range st.sessions {
		if s.held.n == 0 {
			continue
		}
		seqs = seqs[:0]
		for l := range s.held.all {
			if s.waits[l.seq] != nil {
				d.fail("request %d of session %d holds and waits", l.seq, s.id)
				return
			}
			seqs = append(seqs, l.seq)
		}
		slices.Sort(seqs)
		for i := 1; i < len(seqs); i++ {
			if seqs[i] == seqs[i-1] {
				d.fail("request %d of session %d holds two locks", seqs[i], s.id)
				return
			}
		}
	}
}

// count reads a record count. Every record takes at least one byte, so a
// count beyond the remaining bytes is corrupt; checking it first keeps a
// forged count from driving a long loop.
func (d *decoder) count() uint64 {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("count %d exceeds the remaining %d bytes", n, len(d.b))
		return 0
	}
	return n
}
