package lockbench

import (
	"fmt"
	"strconv"
	"strings"
)

// ParsePoints reads a sweep's points: a comma-separated list of positive
// whole numbers, each optionally with the suffix k (thousand) or M
// (million), such as "1,2,4,8" or "10k,30k,100k,300k,1M" (1.5M is allowed
// if it comes to a whole number). The list must be strictly increasing, so
// a chart's x axis reads left to right in the order run.
func ParsePoints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("empty point in %q", s)
		}
		mult := 1.0
		switch {
		case strings.HasSuffix(f, "k") || strings.HasSuffix(f, "K"):
			mult, f = 1e3, f[:len(f)-1]
		case strings.HasSuffix(f, "M"):
			mult, f = 1e6, f[:len(f)-1]
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("point %q: not a number", f)
		}
		n := v * mult
		if n < 1 || n != float64(int(n)) || n > 1e9 {
			return nil, fmt.Errorf("point %q: want a whole number from 1 to 1e9", f)
		}
		if len(out) > 0 && int(n) <= out[len(out)-1] {
			return nil, fmt.Errorf("points %q: not increasing at %d", s, int(n))
		}
		out = append(out, int(n))
	}
	return out, nil
}
