package session

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

// The renewer sends one batch for the parts that share a route (the group's
// replica), split at fsm.MaxRenewals, and a batch of its own for each route
// a test made.
func TestBatchesByRoute(t *testing.T) {
	nop := func(context.Context, fsm.Command) (fsm.Result, error) { return fsm.Result{}, nil }
	shared, own := RouteFunc(nop), RouteFunc(nop)
	var parts []*Part
	for i := range fsm.MaxRenewals + 3 {
		parts = append(parts, &Part{id: uint64(i + 1), route: shared})
	}
	lone := &Part{id: 1000, route: own}
	parts = append(parts[:2], append([]*Part{lone}, parts[2:]...)...)

	got := batches(parts)
	require.Len(t, got, 3)
	require.Len(t, got[0], fsm.MaxRenewals)
	require.Len(t, got[1], 3)
	require.Equal(t, []*Part{lone}, got[2])
	for _, b := range got[:2] {
		for _, p := range b {
			require.Same(t, shared, p.route)
		}
	}
	require.Equal(t, uint64(1), got[0][0].id, "parts keep their order")
}
