package grouptable

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/lockapi"
)

// A group of Config.Groups runs on the shard its name hashes to on every
// replica, and every Dir keeps it: the hash never changes (golden values,
// computed before the table moved into this package).
func TestShardIDIsStable(t *testing.T) {
	require.Equal(t, uint64(1), ShardID(""), "the default group keeps the shard it always had")
	require.Equal(t, uint64(1055244266839744176), ShardID("billing"))
	require.Equal(t, uint64(16140579923858781400), ShardID("a"))
}

// A group created online gets a shard of its own each time: never 0 or 1,
// nor the shard its name alone gives, nor its predecessor's under the name.
func TestNewShardIDIsNeverAnOldOne(t *testing.T) {
	seen := map[uint64]bool{ShardID("billing"): true}
	for range 100 {
		id := newShardID("billing")
		require.Greater(t, id, uint64(1))
		require.False(t, seen[id], "shard %d drawn twice, or the name's own", id)
		seen[id] = true
	}
	require.NotZero(t, NewOpID())
}

// A group's voters are 1, 3 or 5 distinct non-zero replica IDs, returned
// sorted; anything else is refused with ErrInvalidVoters, saying why.
func TestCheckVoters(t *testing.T) {
	vs, err := checkVoters([]uint64{3, 1, 2})
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3}, vs)
	for _, tc := range []struct {
		voters []uint64
		why    string
	}{
		{nil, "0 voters"},
		{[]uint64{1, 2}, "2 voters"},
		{[]uint64{1, 2, 3, 4, 5, 6}, "6 voters"},
		{[]uint64{0, 1, 2}, "replica ID 0"},
		{[]uint64{2, 1, 2}, "replica 2 listed twice"},
	} {
		_, err := checkVoters(tc.voters)
		require.ErrorIs(t, err, lockapi.ErrInvalidVoters, "%v", tc.voters)
		require.ErrorContains(t, err, tc.why)
	}
}

// Find names an entry by its group's name, and nothing for another.
func TestViewFind(t *testing.T) {
	v := View{Set: true, Groups: []fsm.GroupEntry{{Name: "a", Shard: 7}, {Name: "b", Shard: 9}}}
	e, ok := v.Find("b")
	require.True(t, ok)
	require.Equal(t, uint64(9), e.Shard)
	_, ok = v.Find("c")
	require.False(t, ok)
}
