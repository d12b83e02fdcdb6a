package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A grant's PartLeft is its part's deadline less the instant asked about:
// 0 once that passed, once the part ended, and for a grant with no part.
func TestGrantPartLeft(t *testing.T) {
	p := &Part{done: make(chan struct{}), lease: lease{life: 4 * time.Second, deadline: at(10 * time.Second)}}
	g := &Grant{p: p, done: make(chan struct{})}
	require.Equal(t, 3*time.Second, g.PartLeft(at(7*time.Second)))
	require.Zero(t, g.PartLeft(at(10*time.Second)), "at the deadline")
	require.Zero(t, g.PartLeft(at(11*time.Second)), "past it")
	p.lease.extend(at(9 * time.Second)) // a renewal acknowledged: its send + life
	require.Equal(t, 6*time.Second, g.PartLeft(at(7*time.Second)))
	close(p.done)
	require.Zero(t, g.PartLeft(at(7*time.Second)), "the part ended")
	require.Zero(t, Ended(false).PartLeft(at(0)), "no part")
}
