package groupcore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The proposal latency histogram is cumulative, counts what falls beyond
// its last bucket, and costs no allocation to update.
func TestLatencyHistogram(t *testing.T) {
	var h Latency
	for _, d := range []time.Duration{100 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, time.Minute} {
		h.observe(d)
	}
	s := h.snapshot()
	require.Equal(t, uint64(4), s.Count)
	require.Equal(t, time.Minute+4100*time.Microsecond, s.Sum)
	count := func(bound time.Duration) uint64 {
		for _, b := range s.Buckets {
			if b.UpperBound == bound {
				return b.Count
			}
		}
		t.Fatalf("no bucket %v", bound)
		return 0
	}
	require.Equal(t, uint64(1), count(250*time.Microsecond))
	require.Equal(t, uint64(2), count(time.Millisecond), "a bound is inclusive")
	require.Equal(t, uint64(3), count(5*time.Millisecond))
	require.Equal(t, uint64(3), count(10*time.Second), "a minute is beyond the last bucket")
	start := time.Now()
	require.Zero(t, testing.AllocsPerRun(100, func() { h.Since(start) }))
}
