package shard

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Addresses may name their host by IP or by DNS name (a Kubernetes pod's
// name under its headless Service); anything else is refused with an error
// naming the address, before the replica starts.
func TestCheckHostPortAcceptsIPsAndNames(t *testing.T) {
	for _, addr := range []string{
		"127.0.0.1:7001", "[::1]:7001", "[fe80::1%eth0]:7001", "localhost:7001",
		"fl-0.fl:7001", "fl-0.fl.ns.svc:7001", "fl-0.fl.ns.svc.cluster.local.:7001",
		"_raft.example.com:7001", strings.Repeat("a", 63) + ".example:7001",
	} {
		require.NoError(t, CheckHostPort(addr), addr)
	}
	for _, addr := range []string{
		"fl-0:0", "fl-0", ":7001", "fl-0:x", "fl-0:65536",
		"fl 0:7001", "fl-0,fl-1:7001", "fl-0..fl:7001", "-fl.ns:7001", "fl-.ns:7001",
		"fl/0:7001", ".:7001", strings.Repeat("a", 64) + ".example:7001",
		strings.Repeat("abcdefghi.", 26) + "x:7001", "http://fl-0:7001",
	} {
		err := CheckHostPort(addr)
		require.Error(t, err, addr)
		require.Contains(t, err.Error(), "address", addr)
	}
}
