package expiry

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/clock"
)

// manualClock is a clock the test moves by hand; the tests drive fire()
// directly, so its timers are never used.
type manualClock struct{ now time.Time }

func (c *manualClock) Now() time.Time                              { return c.now }
func (c *manualClock) NewTimer(time.Duration) clock.Timer          { panic("unused") }
func (c *manualClock) AfterFunc(time.Duration, func()) clock.Timer { panic("unused") }
func (c *manualClock) advance(d time.Duration)                     { c.now = c.now.Add(d) }

type expiry struct{ id, ka uint64 }

const (
	self     = 1  // the tracker's replica
	term     = 7  // the term it leads
	selfMark = 40 // the index its LeaderStart applied at
)

// recorder keeps what the tracker proposed.
type recorder struct {
	expiries []expiry
	marks    []uint64 // the mark each expiry named
	starts   []uint64 // the term each LeaderStart named
	undelays []string // "name token mark" of each Undelay
	ends     []string // "name election token mark" of each ExpireGrant
}

func newTrackerRec() (*Tracker, *manualClock, *recorder) {
	c := &manualClock{now: time.Unix(1000, 0)}
	rec := &recorder{}
	tr := New(c, 250*time.Millisecond, self, Actions{
		Start: func(term uint64) { rec.starts = append(rec.starts, term) },
		Expire: func(id, ka, mark uint64) {
			rec.expiries = append(rec.expiries, expiry{id, ka})
			rec.marks = append(rec.marks, mark)
		},
		Undelay: func(name string, token, mark uint64) {
			rec.undelays = append(rec.undelays, fmt.Sprint(name, " ", token, " ", mark))
		},
		ExpireGrant: func(name string, election bool, token, mark uint64) {
			rec.ends = append(rec.ends, fmt.Sprint(name, " ", election, " ", token, " ", mark))
		},
	})
	return tr, c, rec
}

func newTracker() (*Tracker, *manualClock, *[]expiry) {
	tr, c, rec := newTrackerRec()
	return tr, c, &rec.expiries
}

// lead makes the tracker's replica the leader of term, its LeaderStart
// applied at selfMark.
func lead(tr *Tracker) {
	tr.SetLeader(true, term)
	tr.fire()
	tr.LeaderStarted(selfMark, self, term)
}

// newLeader is newTracker's tracker once its replica leads (lead).
func newLeader() (*Tracker, *manualClock, *[]expiry) {
	tr, c, got := newTracker()
	lead(tr)
	return tr, c, got
}

func TestFollowerNeverExpires(t *testing.T) {
	tr, c, got := newTracker()
	tr.Touch(1, 10, time.Second)
	c.advance(time.Hour)
	require.Equal(t, time.Hour, tr.fire())
	require.Empty(t, *got)
}

func TestLeaderExpiresOneTTLAfterTheLastKeepAlive(t *testing.T) {
	tr, c, got := newLeader()
	tr.Touch(1, 10, time.Second)
	c.advance(600 * time.Millisecond)
	tr.Touch(1, 20, time.Second) // renewed: the timer restarts
	require.Equal(t, time.Second, tr.fire())
	c.advance(999 * time.Millisecond)
	require.Equal(t, time.Millisecond, tr.fire())
	require.Empty(t, *got)
	c.advance(time.Millisecond)
	tr.fire()
	require.Equal(t, []expiry{{1, 20}}, *got, "the expiry names the latest keep-alive")
}

func TestPromotionGivesEverySessionAFullTTL(t *testing.T) {
	tr, c, got := newTracker()
	tr.Touch(1, 10, time.Second)
	tr.Touch(2, 11, 3*time.Second)
	c.advance(5 * time.Second) // both would be long expired by their touch times
	lead(tr)
	require.Equal(t, time.Second, tr.fire())
	require.Empty(t, *got)
	c.advance(time.Second)
	tr.fire()
	require.Equal(t, []expiry{{1, 10}}, *got)
	tr.Remove(1)
	c.advance(1999 * time.Millisecond)
	tr.fire()
	require.Equal(t, []expiry{{1, 10}}, *got, "session 2 has its own TTL")
	c.advance(time.Millisecond)
	tr.fire()
	require.Equal(t, []expiry{{1, 10}, {2, 11}}, *got)
}

func TestExpiryIsRetriedUntilTheSessionGoes(t *testing.T) {
	tr, c, got := newLeader()
	tr.Touch(7, 1, time.Second)
	c.advance(time.Second)
	require.Equal(t, 250*time.Millisecond, tr.fire())
	require.Len(t, *got, 1)
	c.advance(250 * time.Millisecond)
	tr.fire()
	require.Equal(t, []expiry{{7, 1}, {7, 1}}, *got, "not applied yet: proposed again")
	tr.Remove(7) // the expiry was applied
	c.advance(time.Hour)
	tr.fire()
	require.Len(t, *got, 2)
	require.Zero(t, tr.Len())
}

func TestDemotionStopsExpiries(t *testing.T) {
	tr, c, got := newLeader()
	tr.Touch(1, 1, time.Second)
	tr.SetLeader(false, 0)
	c.advance(time.Hour)
	tr.fire()
	require.Empty(t, *got)
}

func TestResetFromSnapshotRestartsTimers(t *testing.T) {
	tr, c, got := newLeader()
	tr.Touch(1, 1, time.Second)
	c.advance(900 * time.Millisecond)
	tr.Reset([]Session{{ID: 2, KeepAlive: 5, TTL: time.Second}}, nil, nil, selfMark)
	c.advance(900 * time.Millisecond)
	tr.fire()
	require.Empty(t, *got, "session 1 is gone, session 2 started a full TTL at the reset")
	c.advance(100 * time.Millisecond)
	tr.fire()
	require.Equal(t, []expiry{{2, 5}}, *got)
}

// Renewals leave stale heap items behind; the heap is compacted so it stays
// proportional to the sessions tracked.
func TestStaleTimersAreCompacted(t *testing.T) {
	tr, c, _ := newLeader()
	for i := range 10000 {
		tr.Touch(uint64(i%10), uint64(i), time.Minute)
		c.advance(time.Millisecond)
	}
	require.LessOrEqual(t, len(tr.due), 4*10+64+1)
}

func TestRunProposesOnTheRealClock(t *testing.T) {
	fired := make(chan expiry, 1)
	started := make(chan uint64, 1)
	tr := New(clock.Real, time.Hour, self, Actions{
		Start: func(term uint64) { started <- term },
		Expire: func(id, ka, _ uint64) {
			select {
			case fired <- expiry{id, ka}:
			default:
			}
		},
	})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { tr.Run(stop); close(done) }()
	tr.SetLeader(true, term)
	require.Equal(t, uint64(term), <-started)
	tr.LeaderStarted(selfMark, self, term)
	tr.Touch(3, 9, 20*time.Millisecond)
	require.Equal(t, expiry{3, 9}, <-fired)
	close(stop)
	<-done
}

// A new leader expires nothing until its own LeaderStart applied, and
// then gives every session a full TTL from that moment; its expiries name
// the mark. Another replica's LeaderStart, or one of an older term, does
// not arm it.
func TestNoExpiryBeforeOwnLeaderStart(t *testing.T) {
	tr, c, rec := newTrackerRec()
	tr.Touch(1, 10, time.Second)
	c.advance(5 * time.Second)
	tr.SetLeader(true, term)
	require.Equal(t, 250*time.Millisecond, tr.fire())
	require.Equal(t, []uint64{term}, rec.starts)
	c.advance(250 * time.Millisecond)
	tr.fire()
	require.Equal(t, []uint64{term, term}, rec.starts, "proposed again until it applies")

	tr.LeaderStarted(30, 2, term-1) // a predecessor's, replayed
	tr.LeaderStarted(31, self, term-1)
	c.advance(time.Hour)
	tr.fire()
	require.Empty(t, rec.expiries)

	tr.LeaderStarted(selfMark, self, term)
	startsBefore := len(rec.starts)
	c.advance(999 * time.Millisecond)
	tr.fire()
	require.Empty(t, rec.expiries, "a full TTL from the leader's start")
	c.advance(time.Millisecond)
	tr.fire()
	require.Equal(t, []expiry{{1, 10}}, rec.expiries)
	require.Equal(t, []uint64{selfMark}, rec.marks)
	require.Len(t, rec.starts, startsBefore, "armed: no more LeaderStart")
}

// Once another leader's LeaderStart applied, this replica's expiries would
// be refused: it stops proposing them.
func TestAnotherLeaderStartDisarms(t *testing.T) {
	tr, c, rec := newTrackerRec()
	lead(tr)
	tr.Touch(1, 10, time.Second)
	tr.LeaderStarted(selfMark+5, 2, term+1)
	c.advance(time.Hour)
	tr.fire()
	require.Empty(t, rec.expiries)
}

// A snapshot whose mark is not this leader's disarms it too.
func TestResetWithAnotherMarkDisarms(t *testing.T) {
	tr, c, rec := newTrackerRec()
	lead(tr)
	tr.Reset([]Session{{ID: 2, KeepAlive: 5, TTL: time.Second}}, nil, nil, selfMark+9)
	c.advance(time.Hour)
	tr.fire()
	require.Empty(t, rec.expiries)
	require.NotEmpty(t, rec.starts)
}

// A lock-delay and a maximum hold run from when the replica applied them,
// only on the leader, and the leader proposes their end naming its mark,
// again every retry until the state shows it ended.
func TestDelaysAndHoldsEndOnTheLeader(t *testing.T) {
	tr, c, rec := newTrackerRec()
	tr.Delayed(Delay{Name: "L", Token: 7, D: 2 * time.Second})
	tr.Held(Hold{Name: "E", Election: true, Token: 9, D: 3 * time.Second})
	c.advance(time.Hour)
	require.Equal(t, time.Hour, tr.fire(), "a follower ends nothing")
	require.Empty(t, rec.undelays)

	lead(tr) // a new leader: both restart in full
	c.advance(2*time.Second - time.Millisecond)
	require.Equal(t, time.Millisecond, tr.fire())
	require.Empty(t, rec.undelays)
	c.advance(time.Millisecond)
	require.Equal(t, 250*time.Millisecond, tr.fire(), "the retry")
	require.Equal(t, []string{fmt.Sprint("L 7 ", selfMark)}, rec.undelays)
	c.advance(time.Second)
	tr.fire()
	require.Equal(t, []string{fmt.Sprint("E true 9 ", selfMark)}, rec.ends)
	require.Len(t, rec.undelays, 2, "asked again after retry")

	// Once applied, they are forgotten.
	tr.Undelayed("L", 6) // another delay's end: not this one
	d, h := tr.Pending()
	require.Equal(t, [2]int{1, 1}, [2]int{d, h})
	tr.Undelayed("L", 7)
	tr.Freed(9)
	d, h = tr.Pending()
	require.Equal(t, [2]int{0, 0}, [2]int{d, h})
	c.advance(time.Hour)
	tr.fire()
	require.Len(t, rec.undelays, 2)
	require.Len(t, rec.ends, 1)
}

// A later delay of the same lock replaces the earlier one; a snapshot's
// delays and holds restart in full; a leader change restarts them in full.
func TestDelaysRestartInFull(t *testing.T) {
	tr, c, rec := newTrackerRec()
	lead(tr)
	tr.Delayed(Delay{Name: "L", Token: 7, D: 2 * time.Second})
	c.advance(time.Second)
	tr.Delayed(Delay{Name: "L", Token: 8, D: 2 * time.Second})
	c.advance(1500 * time.Millisecond)
	tr.fire()
	require.Empty(t, rec.undelays, "the second delay runs in full")
	// A new term: everything starts again.
	tr.SetLeader(true, term+1)
	tr.fire()
	tr.LeaderStarted(selfMark+5, self, term+1)
	c.advance(1999 * time.Millisecond)
	tr.fire()
	require.Empty(t, rec.undelays)
	c.advance(time.Millisecond)
	tr.fire()
	require.Equal(t, []string{fmt.Sprint("L 8 ", selfMark+5)}, rec.undelays)

	tr.Reset(nil, []Delay{{Name: "M", Token: 3, D: time.Second}}, []Hold{{Name: "N", Token: 4, D: time.Second}}, selfMark+5)
	c.advance(999 * time.Millisecond)
	tr.fire()
	require.Len(t, rec.undelays, 1)
	c.advance(time.Millisecond)
	tr.fire()
	require.Equal(t, fmt.Sprint("M 3 ", selfMark+5), rec.undelays[1])
	require.Equal(t, []string{fmt.Sprint("N false 4 ", selfMark+5)}, rec.ends)
}

// A batch renews its sessions in one step: each expires a TTL after the
// batch that last renewed it, naming that batch's index, and a session the
// batch did not cover expires on its own schedule.
func TestTouchBatchTimesSessionsInBuckets(t *testing.T) {
	tr, c, got := newLeader()
	for id := uint64(1); id <= 4; id++ {
		tr.Touch(id, 100+id, time.Second)
	}
	tr.Touch(5, 105, 3*time.Second)
	c.advance(600 * time.Millisecond)
	tr.TouchBatch(200, []uint64{1, 2, 3, 5, 99}) // 99: unknown, ignored
	require.Equal(t, 5, tr.Len())
	c.advance(400 * time.Millisecond)
	require.Equal(t, 250*time.Millisecond, tr.fire(), "4's retry is next")
	require.Equal(t, []expiry{{4, 104}}, *got, "4 was not in the batch: it is due now, the batch's in 600ms")
	tr.Remove(4)

	c.advance(300 * time.Millisecond)
	tr.TouchBatch(300, []uint64{2}) // 2 moves on: the first batch's bucket keeps 1 and 3
	c.advance(300 * time.Millisecond)
	tr.fire()
	require.ElementsMatch(t, []expiry{{4, 104}, {1, 200}, {3, 200}}, *got)

	// Renewed or removed sessions leave their bucket's retries.
	*got = nil
	tr.TouchBatch(400, []uint64{1})
	tr.Remove(3)
	c.advance(250 * time.Millisecond)
	tr.fire()
	require.Empty(t, *got, "1 was renewed and 3 removed since the bucket fired")

	// 5 (TTL 3s) and 2 fire by their own TTLs from their batches.
	c.advance(2 * time.Second)
	tr.fire()
	require.ElementsMatch(t, []expiry{{2, 300}, {1, 400}, {5, 200}}, *got)
}

// A new leader restarts every session in full, in buckets by TTL, naming
// each session's own keep-alive.
func TestRestartBucketsByTTL(t *testing.T) {
	tr, c, got := newTracker()
	tr.Touch(1, 10, time.Second)
	tr.TouchBatch(20, []uint64{1})
	tr.Touch(2, 30, 2*time.Second)
	tr.Touch(3, 31, time.Second)
	c.advance(time.Hour)
	lead(tr)
	c.advance(time.Second)
	tr.fire()
	require.ElementsMatch(t, []expiry{{1, 20}, {3, 31}}, *got)
	c.advance(time.Second)
	tr.fire()
	require.Contains(t, *got, expiry{2, 30})
}
