package lockbench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQuantilesAndMedian(t *testing.T) {
	var s samples
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50.0, s.Pct(.5))
	require.Equal(t, 99.0, s.Pct(.99))
	require.Equal(t, 100.0, s.Pct(1))
	require.Equal(t, 1.0, s.Pct(0))
	require.Equal(t, 0.0, samples(nil).Pct(.5))
	require.Equal(t, 2.0, Median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, Median([]float64{4, 1, 3, 2}))
	require.Equal(t, 0.0, Median(nil))
}

func TestResultLineRoundTripsAndNotes(t *testing.T) {
	r := Result{System: "fencelock", Workload: "W4", Workers: 8, Ops: 10}
	r.addNote("unavailable_ms=%v killed_replica=%d", 177.2, 1)
	r.addNote("flag")
	back, err := Parse(r.JSON())
	require.NoError(t, err)
	require.Equal(t, r, back)
	v, ok := back.Note("unavailable_ms")
	require.True(t, ok)
	require.Equal(t, 177.2, v)
	_, ok = back.Note("missing")
	require.False(t, ok)
	require.Contains(t, r.JSON(), `"p50_ms":0,`, "every field of the format is printed")
}

func TestCompareTakesMediansThenRatios(t *testing.T) {
	ours := []Result{{Workload: "W2", OpsPerS: 100}, {Workload: "W2", OpsPerS: 300}, {Workload: "W2", OpsPerS: 200}}
	theirs := []Result{{Workload: "W2", OpsPerS: 50}, {Workload: "W2", OpsPerS: 40}, {Workload: "W2", OpsPerS: 1000}}
	c := Compare("etcd", "W2", ours, theirs)
	require.Equal(t, 3, c.Runs)
	require.Equal(t, 200.0, c.Ours["pairs_per_s"])
	require.Equal(t, 50.0, c.Theirs["pairs_per_s"])
	require.Equal(t, 4.0, c.Ratios["pairs_per_s"])

	w5 := Compare("etcd", "W5", []Result{{Workload: "W5", Notes: "overhead_ms=6 ttl_ms=2000"}},
		[]Result{{Workload: "W5", Notes: "overhead_ms=480 ttl_ms=2000"}})
	require.Equal(t, 0.013, w5.Ratios["overhead_ms"])
}

func TestParseWorkloads(t *testing.T) {
	all := []string{"W1", "W2", "W3"}
	got, err := ParseWorkloads("all", all)
	require.NoError(t, err)
	require.Equal(t, all, got)
	got, err = ParseWorkloads("w3, W1", all)
	require.NoError(t, err)
	require.Equal(t, []string{"W3", "W1"}, got)
	_, err = ParseWorkloads("W9", all)
	require.Error(t, err)
}
