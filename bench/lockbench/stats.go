package lockbench

import (
	"math"
	"slices"
	"time"
)

// Samples are latencies; Pct reads quantiles once they are sorted.
type Samples = samples

// Pct returns the q-quantile of the samples, in ms (they are sorted first).
func (s samples) Pct(q float64) float64 { return s.sorted().pct(q) }

// samples collects latencies.
type samples []time.Duration

func (s samples) sorted() samples {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// pct returns the q-quantile (nearest rank) of sorted samples, in ms.
func (s samples) pct(q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = min(max(i, 0), len(s)-1)
	return ms(s[i])
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// Median returns the median of xs (the mean of the middle two for an even
// count); 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	c := slices.Clone(xs)
	slices.Sort(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}
