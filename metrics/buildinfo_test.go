package metrics

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// fencelock_build_info is one series per replica, 1, whose labels say what
// it runs: the build's version and commit and the log and snapshot formats
// (fencelock.BuildVersion), and it passes Prometheus' lint.
func TestBuildInfo(t *testing.T) {
	ctx := testCtx(t)
	n := startBilling(t, ctx)
	reg := registry(t, n)
	requireLint(t, reg, "fencelock_build_info")

	families, err := reg.Gather()
	require.NoError(t, err)
	v := fencelock.BuildVersion()
	want := map[string]string{"replica": "1", "version": v.Version, "commit": v.Commit,
		"codec": strconv.Itoa(v.Codec), "snapshot": strconv.Itoa(v.Snapshot)}
	found := 0
	for _, f := range families {
		if f.GetName() != "fencelock_build_info" {
			continue
		}
		for _, m := range f.Metric {
			found++
			require.Equal(t, 1.0, m.Gauge.GetValue())
			got := map[string]string{"commit": ""} // Prometheus drops an empty label
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			require.Equal(t, want, got)
		}
	}
	require.Equal(t, 1, found, "one series per replica, not per group")

	// The formats each group writes: a group of one, whose one member
	// reads this build's, raises its gate to them within seconds.
	written := func(family, group string) float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() != family {
				continue
			}
			for _, m := range f.Metric {
				for _, l := range m.Label {
					if l.GetName() == "group" && l.GetValue() == group {
						return m.Gauge.GetValue()
					}
				}
			}
		}
		t.Fatalf("no %s{group=%q}", family, group)
		return 0
	}
	require.Eventually(t, func() bool {
		for _, g := range []string{"", "billing"} {
			if written("fencelock_log_format_written", g) != float64(v.Codec) || written("fencelock_snapshot_format_written", g) != float64(v.Snapshot) {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
	requireLint(t, reg, "fencelock_log_format_written", "fencelock_snapshot_format_written")
}
