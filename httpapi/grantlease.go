package httpapi

import (
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/servicehook"
)

// A grant is made in the session's part in the grant's group, and lasts no
// longer than that part. A heartbeat's lease_ms leaves out a part that
// holds nothing and that it could not renew, so the part a later grant is
// made in may be nearer its deadline than that lease_ms says: its group
// may have failed several renewals meanwhile. So an answer that grants
// carries its own lease_ms, from the grant's part, and the client acts on
// the grant until the earlier of the two.

// grantLease is the lease_ms of an answer that grants grant (a
// *fencelock.Lock or *fencelock.Leadership) to session fs, for a call
// that arrived at arrived (servicehook.Now): see grantLeaseMS.
func grantLease(fs *fencelock.Session, grant any, arrived clock.Instant) *int64 {
	return grantLeaseMS(servicehook.PartLeft(grant, arrived), fs.TTL(), fs.SafetyMargin())
}

// grantLeaseMS is how long after the client's send of a call the client
// may act as holder of the grant it answers, when the grant's part had
// left to live when the call arrived: left, as the client's send came
// before the arrival, less a margin for the client's clock running at
// another rate than this replica's (as a heartbeat's TTL − 2·margin leaves
// one more than the part's TTL − margin), and never more than a
// heartbeat's lease. It is floored at 0: then the grant promises nothing.
func grantLeaseMS(left, ttl, margin time.Duration) *int64 {
	ms := max(0, min(left-margin, ttl-2*margin)).Milliseconds()
	return &ms
}
