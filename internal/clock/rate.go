package clock

import (
	"fmt"
	"time"
)

// Rated is a Jumping clock that runs at Rate times the real one: its Now
// (wall and monotonic readings alike), its Boot and its timers, as a host
// whose oscillator is fast or slow would. It lets tests give replicas and
// holders clocks whose rates differ, which is what a holder's safety
// margin must cover (its lease is timed on its own clock, the group's
// expiry on the leader's). Wall steps made on its Jumping apply too.
type Rated struct {
	j    *Jumping
	rate float64
	t0   time.Time // the real time at which the clocks agreed
	b0   Instant   // Real's Boot reading then
}

// NewRated returns a clock running at rate times the real one, agreeing
// with it now, with j's wall steps. It fails unless 0.5 ≤ rate ≤ 2: beyond
// that the clock stands for no host a test means.
func NewRated(j *Jumping, rate float64) (*Rated, error) {
	if !(rate >= 0.5 && rate <= 2) {
		return nil, fmt.Errorf("clock: rate %v outside [0.5, 2]", rate)
	}
	return &Rated{j: j, rate: rate, t0: time.Now(), b0: Real.(Booter).Boot()}, nil
}

// Rate returns how fast r runs against the real clock.
func (r *Rated) Rate() float64 { return r.rate }

func (r *Rated) scale(d time.Duration) time.Duration { return time.Duration(float64(d) * r.rate) }

// real is how long a duration by r lasts in real time.
func (r *Rated) real(d time.Duration) time.Duration { return time.Duration(float64(d) / r.rate) }

// Now returns the time by r: the time since the clocks agreed, scaled, with
// j's wall steps applied.
func (r *Rated) Now() time.Time {
	t := r.t0.Add(r.scale(time.Since(r.t0)))
	if moved, ok := shiftWall(t, r.j.offset.Load()); ok {
		return moved
	}
	return t
}

// Boot is Real's Boot reading, scaled the same way.
func (r *Rated) Boot() Instant {
	return r.b0.Add(r.scale(Real.(Booter).Boot().Sub(r.b0)))
}

// NewTimer returns a timer that fires after d by r.
func (r *Rated) NewTimer(d time.Duration) Timer {
	return ratedTimer{Real.NewTimer(r.real(d)), r}
}

// AfterFunc calls f after d by r.
func (r *Rated) AfterFunc(d time.Duration, f func()) Timer {
	return ratedTimer{Real.AfterFunc(r.real(d), f), r}
}

type ratedTimer struct {
	t Timer
	r *Rated
}

func (t ratedTimer) C() <-chan time.Time        { return t.t.C() }
func (t ratedTimer) Stop() bool                 { return t.t.Stop() }
func (t ratedTimer) Reset(d time.Duration) bool { return t.t.Reset(t.r.real(d)) }
