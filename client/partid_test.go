package client

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// A named group's lock names its holder and waiter by their sessions'
// session_id and their parts' part_id; the default group's by session_id
// alone (the part is the session), and so does a server from before
// part_id. A part whose session its group does not know has no
// holder_session: SessionID 0, PartID its part.
func TestViewsCarryPartIDs(t *testing.T) {
	decode := func(raw string) fencelock.LockInfo {
		var l lockJSON
		require.NoError(t, json.Unmarshal([]byte(raw), &l))
		return lockInfoOf(l)
	}
	named := decode(`{"name":"x@b","held":true,"holder_session":"65536","holder_part":"131072","fencing_token":"9",
		"holders":[{"session_id":"65536","part_id":"131072","fencing_token":"9"}],
		"queue":["65537"],"waiting":[{"session_id":"65537","part_id":"131073","place":1}]}`)
	require.Equal(t, []uint64{65536, 131072}, []uint64{named.SessionID, named.PartID})
	require.Equal(t, []uint64{65536, 131072}, []uint64{named.Holders[0].SessionID, named.Holders[0].PartID})
	require.Equal(t, []uint64{65537, 131073}, []uint64{named.Waiting[0].SessionID, named.Waiting[0].PartID})
	def := decode(`{"name":"x","held":true,"holder_session":"65536","fencing_token":"9",
		"holders":[{"session_id":"65536","fencing_token":"9"}]}`)
	require.Equal(t, []uint64{65536, 65536}, []uint64{def.SessionID, def.PartID})
	require.Equal(t, []uint64{65536, 65536}, []uint64{def.Holders[0].SessionID, def.Holders[0].PartID})
	unknown := decode(`{"name":"x@b","held":true,"holder_part":"131072","fencing_token":"9",
		"holders":[{"session_id":"0","part_id":"131072","fencing_token":"9"}]}`)
	require.Equal(t, []uint64{0, 131072}, []uint64{unknown.SessionID, unknown.PartID})
	require.Equal(t, []uint64{0, 131072}, []uint64{unknown.Holders[0].SessionID, unknown.Holders[0].PartID})

	var l leaderJSON
	require.NoError(t, json.Unmarshal([]byte(`{"session_id":"65536","part_id":"131072","token":"9"}`), &l))
	info := leaderInfoOf(&l, "e@b")
	require.Equal(t, []uint64{65536, 131072}, []uint64{info.SessionID, info.PartID})
}
