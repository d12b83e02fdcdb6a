package client

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// acquireBody and releaseBody write what encoding/json wrote for the
// bodies before them, byte for byte.
func TestBodiesAsMarshalWrote(t *testing.T) {
	type acquire struct {
		SessionID wid   `json:"session_id"`
		Wait      bool  `json:"wait"`
		Shared    bool  `json:"shared,omitempty"`
		Permits   int   `json:"permits,omitempty"`
		MaxHoldMS int64 `json:"max_hold_ms,omitempty"`
	}
	type release struct {
		SessionID    wid `json:"session_id"`
		FencingToken wid `json:"fencing_token"`
	}
	for _, c := range []struct {
		id   uint64
		wait bool
		m    lockMode
	}{
		{1, true, lockMode{}}, {393216, false, lockMode{shared: true}}, {1<<64 - 1, true, lockMode{shared: true, permits: 3}},
		{7, true, lockMode{maxHold: 5 * time.Second}}, {7, false, lockMode{shared: true, permits: 64, maxHold: 1500 * time.Millisecond}},
	} {
		want, err := json.Marshal(acquire{wid(c.id), c.wait, c.m.shared, c.m.permits, c.m.maxHold.Milliseconds()})
		require.NoError(t, err)
		require.Equal(t, string(want), string(acquireBody(c.id, c.wait, c.m)))
	}
	for _, c := range [][2]uint64{{1, 0}, {393216, 7}, {1<<64 - 1, 1<<64 - 1}} {
		want, err := json.Marshal(release{wid(c[0]), wid(c[1])})
		require.NoError(t, err)
		require.Equal(t, string(want), string(releaseBody(c[0], c[1])))
	}
}
