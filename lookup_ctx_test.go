package fencelock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A call that names a group this replica does not run reads the group
// table first. That read ends with the caller's context, not with a bound
// of its own (the lookup's 5 s): a call its caller gives up returns at once
// with ErrUnavailable and the context's error, as every call's contract
// says, even on a replica cut off from the table's quorum.
func TestGroupLookupEndsWithTheCallersContext(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cut := c.leader(ctx)%3 + 1
	c.net.Isolate(c.addr(cut))

	call, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gaveUp := time.AfterFunc(200*time.Millisecond, giveUp) // the caller gives up while the table read waits
	defer gaveUp.Stop()
	_, err := c.node(cut).Inspect(call, "x@nosuch")
	require.ErrorIs(t, err, context.Canceled, "the lookup outlived its caller: %v", err)
	require.ErrorIs(t, err, ErrUnavailable)
}
