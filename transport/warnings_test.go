package transport

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Refusal warnings are logged at most once a minute per peer, whatever
// their text (a redialing peer's come from a new port each time), with the
// count of those left out, and with one "fencelock: " prefix.
func TestRefusalWarningsOncePerMinutePerPeer(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var got []string
	w := warnings{now: func() time.Time { return now }, out: func(m string) { got = append(got, m) }}

	w.warn("10.0.0.2:7001", "fencelock: transport: peer refused: refused the replica connecting from 10.0.0.2:40001: x")
	for i := range 5 { // once a second, for five seconds
		now = now.Add(time.Second)
		w.warn("10.0.0.2:7001", "transport: peer refused: refused the replica connecting from 10.0.0.2:4000"+string(rune('2'+i))+": x")
	}
	w.warn("10.0.0.3:7001", "transport: peer refused: another peer")
	require.Len(t, got, 2, "%q", got)
	require.Equal(t, "fencelock: transport: peer refused: refused the replica connecting from 10.0.0.2:40001: x", got[0])
	require.True(t, strings.HasPrefix(got[1], "fencelock: transport: peer refused: another peer"), got[1])

	now = now.Add(time.Minute)
	w.warn("10.0.0.2:7001", "transport: peer refused: again")
	require.Len(t, got, 3)
	require.Equal(t, "fencelock: transport: peer refused: again (5 more warnings about 10.0.0.2:7001 left out since the last one)", got[2])

	now = now.Add(30 * time.Second)
	w.warn("10.0.0.2:7001", "left out")
	now = now.Add(31 * time.Second)
	w.warn("10.0.0.2:7001", "next")
	require.Equal(t, "fencelock: next (1 more warning about 10.0.0.2:7001 left out since the last one)", got[3])
	for _, m := range got {
		require.Equal(t, 1, strings.Count(m, "fencelock:"), m)
	}
}
