package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Rejoin ends one replica's isolation and nothing else: a partition and a
// cut link made meanwhile stay, as Heal would not leave them.
func TestRejoinEndsIsolationAlone(t *testing.T) {
	n := NewNetwork(1)
	a, b, c := n.Addr(1), n.Addr(2), n.Addr(3)
	n.Partition([]string{a, b}, []string{c})
	n.Cut(b, a)
	n.Isolate(a)
	n.Isolate(c)
	require.True(t, n.cut(a, b), "an isolated replica reaches another")

	n.Rejoin(a)
	require.False(t, n.cut(a, b), "a rejoined replica reaches its side of the partition")
	require.True(t, n.cut(b, a), "the cut link stays")
	require.True(t, n.cut(a, c), "the partition stays")
	require.True(t, n.cut(c, b), "another isolated replica stays isolated")
}
