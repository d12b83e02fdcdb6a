package replica

import (
	"github.com/fencelock/fencelock/internal/replica/shard"
	"github.com/fencelock/fencelock/lockapi"
)

// The errors the root package re-exports under the same names; their
// meaning is documented there. They are the leaf's (package lockapi), so
// that a client which links no engine tests for the same values.
var (
	ErrUnavailable   = lockapi.ErrUnavailable
	ErrClosed        = lockapi.ErrClosed
	ErrInvalidConfig = lockapi.ErrInvalidConfig
	ErrMembership    = lockapi.ErrMembership
	ErrIDRemoved     = lockapi.ErrIDRemoved
	ErrRemoved       = lockapi.ErrRemoved
	ErrUnknownGroup  = lockapi.ErrUnknownGroup
	ErrNoQuorum      = lockapi.ErrNoQuorum

	// The group table's (package grouptable).
	ErrGroupExists      = lockapi.ErrGroupExists
	ErrInvalidGroupName = lockapi.ErrInvalidGroupName
	ErrInvalidVoters    = lockapi.ErrInvalidVoters
	ErrGroupHoldsLocks  = lockapi.ErrGroupHoldsLocks
	ErrGroupDropped     = lockapi.ErrGroupDropped
	ErrGroupMoved       = lockapi.ErrGroupMoved
)

// plural is "1 lock", "2 locks" (shard.Plural).
func plural(n int, noun string) string { return shard.Plural(n, noun) }
