package integration_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
)

// In a brand-new group the very first grants already carry the group's ID:
// a grant is applied only after the ID (its entry has a higher index), so
// its fence, read the moment the grant is reported, never has group 0.
// Every replica opens a session and asks for a lock, then campaigns, at
// once, before any leader exists.
func TestFirstGrantsOfANewGroupCarryItsID(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	type seen struct {
		what  string
		group uint64
	}
	var mu sync.Mutex
	var seens []seen
	record := func(what string, group uint64) {
		mu.Lock()
		defer mu.Unlock()
		seens = append(seens, seen{what, group})
	}
	var wg sync.WaitGroup
	for id, n := range running(c) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := n.NewSession(ctx)
			if !assertNoError(t, err) {
				return
			}
			defer s.Close(ctx)
			l, err := s.Acquire(ctx, fmt.Sprintf("first-%d", id))
			if !assertNoError(t, err) {
				return
			}
			record(fmt.Sprintf("replica %d's first lock", id), l.Fence().Group)
			lead, err := s.Campaign(ctx, "first", "")
			if !assertNoError(t, err) {
				return
			}
			record(fmt.Sprintf("replica %d's term", id), lead.Fence().Group)
			assertNoError(t, lead.Resign(ctx)) // the next replica's turn
		}()
	}
	wg.Wait()
	id := c.Node(1).Status().GroupID
	require.NotZero(t, id)
	require.Len(t, seens, 6)
	for _, s := range seens {
		require.Equal(t, id, s.group, "%s: the group's ID", s.what)
	}
}
