package groupcore

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/lockapi"
)

// End stops a group once, in the order its makers rely on: first runs
// while Done is still open and Context alive (a shard marks itself
// closing there), then once Done is closed and Context ended (a shard
// closes its proposer and its subscribers there); a second End runs
// neither. Goroutines Spawn started are what Wait waits for.
func TestEndOnceInOrder(t *testing.T) {
	var g Core
	g.Init(slog.New(slog.DiscardHandler), 1, 0, "g", 7, nil)
	require.Equal(t, "g", g.Name())
	require.NotNil(t, g.Logger())

	spawned := false
	g.Spawn(func() {
		<-g.Context().Done()
		spawned = true
	})

	var order []string
	state := func() string {
		select {
		case <-g.Done():
			if g.Context().Err() == nil {
				return "done, context alive"
			}
			return "done, context ended"
		default:
			if g.Context().Err() != nil {
				return "open, context ended"
			}
			return "open, context alive"
		}
	}
	g.End(func() { order = append(order, "first: "+state()) }, func() { order = append(order, "then: "+state()) })
	g.End(func() { order = append(order, "first again") }, func() { order = append(order, "then again") })
	g.Wait()
	require.True(t, spawned, "Wait waited for what Spawn started")
	require.Equal(t, []string{"first: open, context alive", "then: done, context ended"}, order)
	require.ErrorIs(t, g.ClosedErr(), lockapi.ErrClosed)
}
