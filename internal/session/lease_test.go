package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/clock"
)

// at is the boot-clock instant d after an arbitrary origin.
func at(d time.Duration) clock.Instant { return clock.Instant{}.Add(d) }

// leaseRun is what simulateLease saw.
type leaseRun struct {
	gaveUp      time.Duration // when the holder's deadline passed; 0 if it never did
	maxInFlight int
	acked       int
}

// simulateLease drives the session's own schedule (renewals) and deadline
// (lease) through virtual time, as the renewer does, from an
// open sent at 0 until horizon or until the holder's deadline passes. The
// i-th keep-alive (from 1) is answered OK latency(i) after it was sent.
func simulateLease(ttl, margin time.Duration, latency func(i int) time.Duration, horizon time.Duration) leaseRun {
	l := lease{life: ttl - margin, deadline: at(ttl - margin)}
	r := renewals{period: ttl / 3, retry: ttl / 20, next: at(ttl / 3)}
	type keepAlive struct{ sent, answer clock.Instant }
	var inFlight []keepAlive
	var run leaseRun
	for now, sent := at(0), 0; now.Before(at(horizon)); {
		next, first := now.Add(r.wait(now)), -1 // the next send, or the first answer before it
		for i, k := range inFlight {
			if !k.answer.After(next) {
				next, first = k.answer, i
			}
		}
		if !l.live(next) { // nothing renews it before the deadline
			run.gaveUp = l.deadline.Sub(at(0))
			return run
		}
		now = next
		switch {
		case first >= 0:
			l.extend(inFlight[first].sent)
			r.answered(true, now)
			inFlight = append(inFlight[:first], inFlight[first+1:]...)
			run.acked++
		case r.send(now):
			sent++
			inFlight = append(inFlight, keepAlive{now, now.Add(latency(sent))})
			run.maxInFlight = max(run.maxInFlight, len(inFlight))
		}
	}
	return run
}

func constant(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// Keep-alives do not wait for one another: with TTL 2s and the default
// margin (400ms) each one may take up to TTL − margin − TTL/3 ≈ 933ms to be
// acknowledged and the session lives on, several in flight when commits take
// longer than the period. Beyond that it gives up at the deadline the last
// acknowledged one earned (the open's, if none was).
func TestLeaseSurvivesCommitsUpToTTLMinusMarginMinusPeriod(t *testing.T) {
	const ttl, margin = 2 * time.Second, 400 * time.Millisecond
	const period, hour = ttl / 3, time.Hour

	ok := simulateLease(ttl, margin, constant(600*time.Millisecond), hour)
	require.Zero(t, ok.gaveUp, "600ms commits: the session lives")
	require.Equal(t, 1, ok.maxInFlight)
	require.Greater(t, ok.acked, 5000)

	overlap := simulateLease(ttl, margin, constant(900*time.Millisecond), hour)
	require.Zero(t, overlap.gaveUp, "900ms commits, longer than the 667ms period: still alive")
	require.Equal(t, 2, overlap.maxInFlight, "the next keep-alive went out before the previous was answered")

	slow := simulateLease(ttl, margin, constant(950*time.Millisecond), hour)
	require.Equal(t, ttl-margin, slow.gaveUp, "the first answer comes after the open's deadline")
	require.Zero(t, slow.acked)

	// Three fast keep-alives, then none answered in time: the third, sent
	// at 3 periods, earned the last deadline.
	stalls := simulateLease(ttl, margin, func(i int) time.Duration {
		if i <= 3 {
			return 10 * time.Millisecond
		}
		return time.Hour
	}, hour)
	require.Equal(t, 3*period+ttl-margin, stalls.gaveUp)
	require.Equal(t, 3, stalls.acked)
	require.Equal(t, 2, stalls.maxInFlight, "the fourth and fifth went out unanswered before the deadline")

	// An old, slow answer arriving after a newer, fast one moves nothing back.
	reordered := simulateLease(ttl, margin, func(i int) time.Duration {
		if i == 1 {
			return 900 * time.Millisecond
		}
		if i == 2 {
			return 10 * time.Millisecond
		}
		return time.Hour
	}, hour)
	require.Equal(t, 2*period+ttl-margin, reordered.gaveUp)
	require.Equal(t, 2, reordered.acked)
}

// The tolerance is TTL − margin − TTL/3 for every TTL and margin the session
// accepts: a little less latency keeps the session, a little more ends it.
func TestLeaseToleranceBoundary(t *testing.T) {
	for _, c := range []struct{ ttl, margin time.Duration }{
		{2 * time.Second, 400 * time.Millisecond},  // default margin
		{3 * time.Second, 1500 * time.Millisecond}, // the largest margin accepted
		{10 * time.Second, 10 * time.Millisecond},
		{100 * time.Millisecond, 20 * time.Millisecond},
	} {
		t.Run(fmt.Sprint(c.ttl, "/", c.margin), func(t *testing.T) {
			tolerance := c.ttl - c.margin - c.ttl/3
			require.Positive(t, tolerance)
			eps := tolerance / 100
			below := simulateLease(c.ttl, c.margin, constant(tolerance-eps), 100*c.ttl)
			require.Zero(t, below.gaveUp, "latency %v, just below %v", tolerance-eps, tolerance)
			above := simulateLease(c.ttl, c.margin, constant(tolerance+eps), 100*c.ttl)
			require.NotZero(t, above.gaveUp, "latency %v, just above %v", tolerance+eps, tolerance)
		})
	}
}

// At most MaxKeepAlivesInFlight keep-alives are in flight: a due one waits
// until one is answered, and then goes out at once. A failed one brings the
// next forward to within retry.
func TestRenewalsBoundInFlightAndRetrySooner(t *testing.T) {
	r := renewals{period: time.Second, retry: 100 * time.Millisecond, next: at(time.Second)}
	require.False(t, r.send(at(999*time.Millisecond)), "not due yet")
	require.Equal(t, time.Millisecond, r.wait(at(999*time.Millisecond)))
	for i := 1; i <= MaxKeepAlivesInFlight; i++ {
		now := at(time.Duration(i) * time.Second)
		require.True(t, r.send(now), "keep-alive %d", i)
		require.False(t, r.send(now), "one per period")
	}
	full := at(time.Duration(MaxKeepAlivesInFlight+1) * time.Second)
	require.False(t, r.send(full), "due, but %d are in flight", MaxKeepAlivesInFlight)
	require.False(t, r.send(full.Add(time.Hour)))
	r.answered(true, full.Add(time.Hour))
	require.Zero(t, r.wait(full.Add(time.Hour)), "an answer frees a slot, and the overdue one goes now")
	require.True(t, r.send(full.Add(time.Hour)))

	now := full.Add(time.Hour + time.Millisecond)
	r.answered(false, now)
	require.Equal(t, 100*time.Millisecond, r.wait(now), "after a failure the next is due within retry")
	require.True(t, r.send(now.Add(100*time.Millisecond)))
	r.answered(false, now.Add(2*time.Hour))
	require.Zero(t, r.wait(now.Add(2*time.Hour)))
}

// The deadline only moves forwards: an answer to an older keep-alive,
// arriving after a newer one's, changes nothing.
func TestLeaseExtendsFromEachSendTime(t *testing.T) {
	l := lease{life: time.Second, deadline: at(time.Second)}
	l.extend(at(2 * time.Second))
	require.Equal(t, at(3*time.Second), l.deadline)
	l.extend(at(time.Second))
	require.Equal(t, at(3*time.Second), l.deadline, "an older send earns less")
	require.True(t, l.live(at(3*time.Second-1)))
	require.False(t, l.live(at(3*time.Second)))
}
