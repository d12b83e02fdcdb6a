package integration_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// WithSafetyMargin refuses margins the session cannot honour: above TTL/2 a
// keep-alive has under TTL/6 to commit (at 2TTL/3, none: TTL 3s and margin
// 2.1s gave itself up 0.9s after opening on a healthy group). At TTL/2 the
// session lives on a healthy group.
func TestSafetyMarginMustLeaveTimeToCommit(t *testing.T) {
	cl := fencelocktest.NewCluster(t, 1)
	ctx := testCtx(t)
	n := cl.Node(1)
	for _, m := range []time.Duration{2100 * time.Millisecond, 1500*time.Millisecond + 1, 3 * time.Second, -time.Second} {
		_, err := n.NewSession(ctx, fencelock.WithTTL(3*time.Second), fencelock.WithSafetyMargin(m))
		require.ErrorIs(t, err, fencelock.ErrInvalidTTL, "margin %v", m)
	}
	_, err := n.NewSession(ctx, fencelock.WithSafetyMargin(fencelock.DefaultSessionTTL/2+1))
	require.ErrorIs(t, err, fencelock.ErrInvalidTTL, "the bound applies to the default TTL too")

	const ttl = 2 * time.Second // keep-alives have TTL/6, 333ms, to commit
	s := newSession(t, ctx, n, fencelock.WithTTL(ttl), fencelock.WithSafetyMargin(ttl/2))
	watch := time.NewTimer(2 * ttl)
	defer watch.Stop()
	select {
	case <-s.Done():
		t.Fatalf("margin TTL/2: the session gave itself up on a healthy group: %v", s.Err())
	case <-watch.C: // two TTLs with nothing happening
	}
	require.NoError(t, s.Close(ctx))
}
