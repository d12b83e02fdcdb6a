package httpapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// A heartbeat's answer lists each group's lease, 0 for a part it did not
// renew, and lease_ms is the shortest over the parts that hold something:
// a part that holds nothing does not shorten it.
func TestLeaseResponse(t *testing.T) {
	const ttl, margin = 3 * time.Second, 600 * time.Millisecond
	full := (ttl - 2*margin).Milliseconds()
	for _, tc := range []struct {
		what   string
		leases []fencelock.GroupLease
		want   map[string]int64
		lease  int64
	}{
		{"create: the default part alone", nil, map[string]int64{"": full}, full},
		{"both renewed", []fencelock.GroupLease{
			{Group: "", Holds: true, Renewed: true, Lease: ttl - margin},
			{Group: "b", Holds: true, Renewed: true, Lease: ttl - margin},
		}, map[string]int64{"": full, "b": full}, full},
		{"b holds nothing and was not renewed", []fencelock.GroupLease{
			{Group: "", Holds: true, Renewed: true, Lease: ttl - margin},
			{Group: "b", Lease: time.Second},
		}, map[string]int64{"": full, "b": 0}, full},
		{"b holds and was not renewed (the heartbeat fails; were it answered, it promises nothing)", []fencelock.GroupLease{
			{Group: "", Holds: true, Renewed: true, Lease: ttl - margin},
			{Group: "b", Holds: true, Lease: time.Second},
		}, map[string]int64{"": full, "b": 0}, 0},
		{"nothing holds, the default part renewed", []fencelock.GroupLease{
			{Group: "", Renewed: true, Lease: ttl - margin},
			{Group: "b", Renewed: true, Lease: ttl - margin},
		}, map[string]int64{"": full, "b": full}, full},
	} {
		r := leaseResponse(ttl, margin, tc.leases)
		require.Equal(t, tc.want, r.Leases, tc.what)
		require.Equal(t, tc.lease, r.LeaseMS, tc.what)
		require.Equal(t, ttl.Milliseconds(), r.TimeoutMS, tc.what)
		j, err := json.Marshal(r)
		require.NoError(t, err)
		var back map[string]any
		require.NoError(t, json.Unmarshal(j, &back))
		require.Contains(t, back, "leases", tc.what)
		require.Contains(t, back, "lease_ms", tc.what)
	}
}

// A grant's lease is its part's time left at the call's arrival, less a
// margin, at most a heartbeat's lease, and never below 0.
func TestGrantLeaseMS(t *testing.T) {
	const ttl, margin = 3 * time.Second, 600 * time.Millisecond
	for _, tc := range []struct {
		left time.Duration
		want int64
	}{
		{ttl - margin, (ttl - 2*margin).Milliseconds()},         // renewed at the arrival
		{ttl, (ttl - 2*margin).Milliseconds()},                  // renewed after it: no more than a heartbeat's
		{time.Second, 400},                                      // a part near its deadline
		{margin + 1500*time.Microsecond, 1},                     // rounded down
		{margin, 0}, {margin / 2, 0}, {0, 0}, {-time.Second, 0}, // nothing promised
	} {
		got := grantLeaseMS(tc.left, ttl, margin)
		require.NotNil(t, got)
		require.Equal(t, tc.want, *got, "left %v", tc.left)
	}
	// Present when 0: a granting answer always says how long it lasts.
	j, err := json.Marshal(AcquireResponse{Granted: true, LeaseMS: grantLeaseMS(0, ttl, margin)})
	require.NoError(t, err)
	require.Contains(t, string(j), `"lease_ms":0`)
	j, err = json.Marshal(AcquireResponse{Granted: false, QueuePosition: 1})
	require.NoError(t, err)
	require.NotContains(t, string(j), "lease_ms")
}
