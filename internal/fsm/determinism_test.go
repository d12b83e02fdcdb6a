package fsm

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// source is what the program generator draws from: a seeded PCG in the
// tests, the fuzzer's bytes in FuzzApply.
type source interface{ Uint64N(n uint64) uint64 }

// byteSource draws from fuzz input; once the bytes run out it draws zeros.
type byteSource struct{ b []byte }

func (s *byteSource) Uint64N(n uint64) uint64 {
	if len(s.b) == 0 {
		return 0
	}
	v := uint64(s.b[0])
	s.b = s.b[1:]
	return v % n
}

// driver generates a plausible but adversarial command stream over a few
// sessions and locks: retried opens, retried and stale requests, releases
// with current and outdated tokens, cancels that race grants, expiries with
// old keep-alive indexes, unknown sessions and unknown kinds.
type driver struct {
	src      source
	sessions []uint64 // every session ID seen, live or ended
	nextSeq  map[uint64]uint64
	floor    map[uint64]uint64
	keep     map[uint64]uint64 // last keep-alive index announced
	nonce    map[uint64]uint64 // the nonce each session was opened with
	ttl      map[uint64]uint64 // the TTL each session was opened with
	grants   []Event           // recent grants, possibly outdated
	delays   []Event           // recent lock-delays, possibly over
	entries  uint64            // entries generated: the clock At is stamped from
	opCmds   uint64            // operator commands generated: their IDs are counted from it
	lastOp   Command           // the last operator command with an ID, to retry
	waiting  map[uint64]int    // requests each session had answered Queued
}

var driverNames = []string{"a", "b", "c", "d/ü"}

func newDriver(src source) *driver {
	return &driver{src: src, nextSeq: map[uint64]uint64{}, floor: map[uint64]uint64{}, keep: map[uint64]uint64{},
		nonce: map[uint64]uint64{}, ttl: map[uint64]uint64{}, waiting: map[uint64]int{}}
}

func (d *driver) n(n uint64) uint64 { return d.src.Uint64N(n) }

// waitingFrom returns the first session, from s on in the order they were
// seen, that had a request queued (it may have left); s if none had.
func (d *driver) waitingFrom(s uint64) uint64 {
	at := max(slices.Index(d.sessions, s), 0)
	for i := range d.sessions {
		if id := d.sessions[(at+i)%len(d.sessions)]; d.waiting[id] > 0 {
			return id
		}
	}
	return s
}

func (d *driver) session() uint64 {
	if len(d.sessions) == 0 || d.n(40) == 0 {
		return d.n(3) // a session that does not exist
	}
	return d.sessions[d.n(uint64(len(d.sessions)))]
}

func (d *driver) newSeq(s uint64) uint64 {
	d.nextSeq[s]++
	return d.nextSeq[s]
}

// oldSeq is a request number the session has (probably) used: a retry.
func (d *driver) oldSeq(s uint64) uint64 {
	return d.nextSeq[s] - min(d.nextSeq[s], d.n(6))
}

func (d *driver) floorOf(s uint64) uint64 {
	if d.n(8) == 0 {
		d.floor[s] = max(d.floor[s], d.nextSeq[s]+1-min(d.nextSeq[s]+1, d.n(4)))
	}
	return d.floor[s]
}

func (d *driver) name() string { return d.pick(driverNames) }

// pick returns one of names or, one time in 50, "" (an invalid name).
func (d *driver) pick(names []string) string {
	if d.n(50) == 0 {
		return "" // invalid
	}
	return names[d.n(uint64(len(names)))]
}

func (d *driver) command() Command {
	switch d.n(20) {
	case 0, 1:
		c := Command{Kind: KindOpenSession, Nonce: 1 + d.n(10), TTL: 1 + d.n(3), Owner: d.n(3)}
		if d.n(30) == 0 {
			c.TTL = 0
		}
		if d.n(8) == 0 { // a lock-delay (rarely, too long)
			c.Delay = 1 + d.n(2)
			if d.n(40) == 0 {
				c.Delay = MaxLockDelay + 1
			}
		}
		return c
	case 2, 3:
		s := d.session()
		return Command{Kind: KindKeepAlive, Session: s, Floor: d.floorOf(s)}
	case 4:
		if d.n(3) == 0 {
			return closeCmd(d.session())
		}
		if d.n(2) == 0 {
			return d.keepAliveBatch()
		}
		s := d.session()
		return Command{Kind: KindKeepAlive, Session: s, Floor: d.floorOf(s)}
	case 5:
		s := d.session()
		return expireCmd(s, d.keep[s]-min(d.keep[s], d.n(3)))
	case 6, 7, 8, 9, 10, 11:
		s := d.session()
		seq := d.newSeq(s)
		if d.n(6) == 0 {
			seq = d.oldSeq(s)
		}
		c := Command{Kind: KindAcquire, Session: s, Seq: seq, Floor: d.floorOf(s), Name: d.name(), Wait: d.n(3) != 0}
		switch d.n(5) {
		case 1, 2: // shared, of the same names: modes switch, and conflict with semaphores
			c.Kind = KindAcquireShared
		case 3: // a semaphore of 2 or 3 permits (or, rarely, too many)
			c.Kind, c.Permits = KindAcquireShared, 2+d.n(2)
			if d.n(4) != 0 {
				c.Name = "sem" // mostly a name of its own, where it fills up
			}
			if d.n(40) == 0 {
				c.Permits = MaxHoldersPerLock + 1
			}
		}
		if d.n(4) == 0 { // a maximum hold (rarely, too long)
			c.MaxHold = 1 + d.n(3)
			if d.n(40) == 0 {
				c.MaxHold = MaxHoldLimit + 1
			}
		}
		return c
	case 12, 13, 14, 15:
		if len(d.grants) > 0 && d.n(5) != 0 {
			g := d.grants[d.n(uint64(len(d.grants)))]
			return Command{Kind: KindRelease, Session: g.Session, Seq: d.newSeq(g.Session), Floor: d.floorOf(g.Session), Name: g.Name, Token: g.Token}
		}
		s := d.session()
		return Command{Kind: KindRelease, Session: s, Seq: d.newSeq(s), Floor: d.floorOf(s), Name: d.name(), Token: d.n(1 << 20)}
	case 16, 17, 18:
		s := d.session()
		target := d.oldSeq(s)
		if d.n(4) == 0 {
			target = d.nextSeq[s] + 1 + d.n(2) // not sent yet
		}
		return Command{Kind: KindCancel, Session: s, Target: target, Floor: d.floorOf(s)}
	default:
		switch d.n(5) {
		case 0: // an operator's revocation, of the current grant or of any
			if len(d.grants) > 0 {
				g := d.grants[d.n(uint64(len(d.grants)))]
				return Command{Kind: KindRevoke, Name: g.Name, Token: g.Token * d.n(2)}
			}
			return Command{Kind: KindRevoke, Name: d.name()}
		case 1:
			return Command{Kind: KindEndSession, Session: d.session()}
		case 2: // the leader's timers: the end of a lock-delay, or of a maximum hold
			if d.n(4) != 0 && len(d.delays) > 0 {
				e := d.delays[d.n(uint64(len(d.delays)))]
				return Command{Kind: KindUndelay, Name: e.Name, Token: e.Token, Mark: d.n(4) / 3}
			}
			if len(d.grants) > 0 {
				g := d.grants[d.n(uint64(len(d.grants)))]
				return Command{Kind: KindExpireGrant, Name: g.Name, Token: g.Token, Mark: d.n(4) / 3}
			}
			return Command{Kind: KindUndelay, Name: d.name(), Token: d.n(1 << 20)}
		case 3: // a resume, now and then: mostly with the right nonce, some attempts retried
			if d.n(3) != 0 {
				break
			}
			s := d.session()
			owner, target := 1+d.n(3), 1+d.n(4)
			// Half keep their queues (an adoption's), by the attempt's ID,
			// so that the draws are those of older versions; those resume
			// a session that waits, if one does.
			keep := target%2 == 0
			if keep {
				s = d.waitingFrom(s)
			}
			c := Command{Kind: KindResume, Session: s, Nonce: d.nonce[s], Owner: owner, Target: target, TTL: d.ttl[s], Keep: keep}
			switch d.n(6) {
			case 0:
				c.Nonce++
			case 1:
				c.TTL++ // a token whose TTL was edited
			}
			return c
		}
		return Command{Kind: Kind([]uint8{0, uint8(maxKind) + 1, 200}[d.n(3)]), Session: d.session()}
	}
}

// keepAliveBatch renews a few sessions as one replica: mostly its own
// (the opens name owners 0 to 2), some another's or unknown, and some
// with an old incarnation's floor.
func (d *driver) keepAliveBatch() Command {
	c := Command{Kind: KindKeepAliveBatch, Owner: d.n(3)}
	if c.Owner == 0 && d.n(4) != 0 {
		c.Owner = 1 // owner 0 is invalid: mostly a valid one
	}
	ids := map[uint64]bool{}
	for range 1 + d.n(3) {
		ids[max(d.session(), 1)] = true // the codec has no session 0
	}
	for _, s := range slices.Sorted(maps.Keys(ids)) {
		c.Renew = append(c.Renew, Renewal{Session: s, Floor: d.floorOf(s)})
	}
	return c
}

// entry returns the commands of the next entry.
//
// Each is stamped with a time, as a proposer stamps its entries (every
// seventh with none, as an old entry has), and each open with a name:
// both from counts rather than draws, so that the program is the one the
// seeds drew before entries had times.
func (d *driver) entry() []Command {
	cmds := make([]Command, 1+d.n(4))
	d.entries++
	var at uint64
	if d.entries%7 != 0 {
		at = 1_780_000_000_000_000_000 + d.entries*1e7
	}
	for i := range cmds {
		cmds[i] = d.operation(d.command())
		cmds[i].At = at
		if cmds[i].Kind == KindOpenSession {
			cmds[i].Name = fmt.Sprintf("s%d@host-%d", cmds[i].Nonce, cmds[i].Owner)
		}
	}
	return cmds
}

// operation gives an operator command an operation ID (version 7), or
// makes it a retry of the last one, or leaves it without, as an older
// entry's: from counts rather than draws, like entry's times.
func (d *driver) operation(c Command) Command {
	if c.Kind != KindRevoke && c.Kind != KindEndSession {
		return c
	}
	d.opCmds++
	switch {
	case d.opCmds%5 == 0:
		return c
	case d.opCmds%3 == 0 && d.lastOp.Op != 0:
		return d.lastOp
	}
	c.Op = 0xf00d<<20 + d.opCmds
	d.lastOp = c
	return c
}

// drive applies n of the driver's entries to h, one by one, learning from
// each: a random state for tests that want one.
func (d *driver) drive(h *harness, n int) {
	for range n {
		cmds := d.entry()
		rs, evs := h.apply(cmds...)
		d.observe(cmds, rs, evs)
	}
}

// observe learns session IDs, grants and keep-alives from an applied entry.
func (d *driver) observe(cmds []Command, rs []Result, evs []Event) {
	for i, c := range cmds {
		if c.Kind == KindOpenSession && rs[i].Status == OK && !slices.Contains(d.sessions, rs[i].Value) {
			d.sessions = append(d.sessions, rs[i].Value)
			d.nonce[rs[i].Value] = c.Nonce
			d.ttl[rs[i].Value] = c.TTL
		}
		// Mostly the new incarnation numbers on from the resume's floor;
		// else the old one goes on, and is refused.
		// The queue events do not reach the driver: a request answered
		// Queued may have left its queue since.
		if rs[i].Status == Queued {
			d.waiting[c.Session]++
		}
		if c.Kind == KindResume && rs[i].Status == OK && d.n(4) != 0 {
			d.nextSeq[c.Session] = max(d.nextSeq[c.Session], rs[i].Value-1)
			d.floor[c.Session] = max(d.floor[c.Session], rs[i].Value)
		}
	}
	for _, e := range evs {
		switch e.Kind {
		case EventGranted:
			d.grants = append(d.grants, e)
			if len(d.grants) > 16 {
				d.grants = d.grants[1:]
			}
		case EventSessionEnded:
			delete(d.waiting, e.Session)
		case EventTouched:
			d.keep[e.Session] = e.Index
		case EventRenewed:
			for _, s := range e.Sessions {
				d.keep[s] = e.Index
			}
		case EventDelayed:
			d.delays = append(d.delays, e)
			if len(d.delays) > 8 {
				d.delays = d.delays[1:]
			}
		case EventUndelayed:
			d.delays = slices.DeleteFunc(d.delays, func(x Event) bool { return x.Name == e.Name && x.Token == e.Token })
		}
	}
}

// coverage counts what a run exercised.
type coverage struct {
	sharedTogether int // shared grants made while another was held
	semaphoreFull  int // semaphore grants that filled it
	holders        map[string]int
	statuses       map[Status]int
	events         map[EventKind]int
	reasons        map[Reason]int
}

func newCoverage() *coverage {
	return &coverage{holders: map[string]int{}, statuses: map[Status]int{}, events: map[EventKind]int{}, reasons: map[Reason]int{}}
}

func (c *coverage) add(rs []Result, evs []Event) {
	for _, r := range rs {
		c.statuses[r.Status]++
	}
	for _, e := range evs {
		switch e.Kind {
		case EventGranted:
			if e.Shared && c.holders[e.Name] > 0 {
				c.sharedTogether++
			}
			if c.holders[e.Name]++; e.Permits > 0 && c.holders[e.Name] == int(e.Permits) {
				c.semaphoreFull++
			}
		case EventFreed:
			c.holders[e.Name]--
		}
		c.events[e.Kind]++
		if e.Reason != 0 {
			c.reasons[e.Reason]++
		}
	}
}

// TestReplayIsDeterministic replays three seeds' programs, and requires
// their coverage together.
func TestReplayIsDeterministic(t *testing.T) {
	cov := newCoverage()
	for _, seed := range []uint64{0x5eed, 0x5eee, 0x5ef1} {
		replayProgram(t, seed, cov)
	}
	t.Logf("coverage: resumed %d, kept queued %d", cov.events[EventResumed], cov.events[EventKeptQueued])
	t.Logf("coverage: delays %d, undelays %d, max holds ended %d, semaphores full %d, grants %d",
		cov.events[EventDelayed], cov.events[EventUndelayed], cov.reasons[ReasonMaxHold], cov.semaphoreFull, cov.events[EventGranted])
	// The programs reached every outcome, so the checks mean something.
	for _, s := range []Status{OK, Granted, Queued, Locked, NotHeld, UnknownSession, Cancelled, Stale, Invalid, NotApplied, Conflict, Refused} {
		require.Positive(t, cov.statuses[s], "status %v never seen", s)
	}
	for _, k := range []EventKind{EventTouched, EventGranted, EventFreed, EventSessionEnded, EventDelayed, EventUndelayed, EventResumed, EventKept, EventKeptQueued, EventRenewed} {
		require.Positive(t, cov.events[k], "event %d never seen", k)
	}
	for _, r := range []Reason{ReasonReleased, ReasonCancelled, ReasonExpired, ReasonClosed, ReasonMaxHold} {
		require.Positive(t, cov.reasons[r], "reason %v never seen", r)
	}
	require.Greater(t, cov.events[EventGranted], 600)
	require.Greater(t, cov.sharedTogether, 60, "shared grants overlapped")
	require.Greater(t, cov.semaphoreFull, 12, "semaphores were full")
}

func replayProgram(t *testing.T, seed uint64, cov *coverage) {
	d := newDriver(rand.New(rand.NewPCG(seed, 0xf00d)))
	a, b := newHarness(t), newHarness(t)
	var c *harness // restored from a's snapshot half way
	var log [][]Command
	const entries = 3000
	for i := range entries {
		cmds := d.entry()
		log = append(log, cmds)
		ra, ea := a.applyAlike(i, cmds, b, c)
		d.observe(cmds, ra, ea)
		cov.add(ra, ea)
		if i%97 == 0 {
			sa := saveBytes(t, a.st)
			require.Equal(t, sa, saveBytes(t, b.st), "entry %d", i)
			if c != nil {
				require.Equal(t, sa, saveBytes(t, c.st), "entry %d", i)
			}
		}
		if i == entries/2 {
			c = harnessFor(t, roundTrip(t, a.st))
		}
	}
	a.requireConverged(b, c)

	// A third replay, straight into a fresh State.
	fresh := New()
	for i, cmds := range log {
		fresh.Apply(uint64(i+1), cmds)
	}
	require.Equal(t, saveBytes(t, a.st), saveBytes(t, fresh))
}
