package fencelock

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
)

// writesNewest reports whether st's groups all write what this build
// reads: from then on, a part opened in a named group records its
// session's ID there.
func writesNewest(st Status) bool {
	v := BuildVersion()
	return writesAll(st, Formats{Codec: v.Codec, Snapshot: v.Snapshot})
}

// writesAll reports whether st's replica and every group it shows write
// want.
func writesAll(st Status, want Formats) bool {
	if st.Writes != want {
		return false
	}
	for _, g := range st.Groups {
		if g.Writes != want {
			return false
		}
	}
	return true
}

// A rolling upgrade: while one replica announces that it reads log
// version 9 only, the groups write 9, a part opened in a named group
// carries no session ID (its open is written without it), and the views
// show it as unknown: SessionID 0, PartID the part's. Once that replica
// runs this build, the gates rise to 10, and a part opened after shows its
// session's ID; the part opened before still shows 0, as documented.
func TestGroupsViewsAcrossTheGate(t *testing.T) {
	var mu sync.Mutex
	old := map[uint64]bool{3: true}
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.Groups = []GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}}
		mu.Lock()
		defer mu.Unlock()
		if old[cfg.ReplicaID] {
			testhook.Announce(cfg, fsm.Gate{Codec: 9, Snapshot: 7})
		}
	})
	ctx := testCtx(t)
	nine := Formats{Codec: 9, Snapshot: 7}
	c.waitStatus(ctx, "writing log version 9", func(_ uint64, st Status) bool {
		if len(st.Groups) != 2 || !allLeaders(st) || st.Writes != nine {
			return false
		}
		for _, g := range st.Groups {
			if g.Writes != nine {
				return false
			}
		}
		return true
	})
	n := c.node(1)
	before := newSession(t, ctx, n)
	_, err := before.Acquire(ctx, "before@a")
	require.NoError(t, err)
	beforePart, ok := before.IDIn("a")
	require.True(t, ok)
	info, err := n.Inspect(ctx, "before@a")
	require.NoError(t, err)
	require.Zero(t, info.SessionID, "at gate 9 the group does not know the part's session")
	require.Equal(t, beforePart, info.PartID)
	require.Zero(t, info.Holders[0].SessionID)
	require.Equal(t, beforePart, info.Holders[0].PartID)
	x, err := before.Acquire(ctx, "x")
	require.NoError(t, err)
	info, err = n.Inspect(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, []uint64{before.ID(), before.ID()}, []uint64{info.SessionID, info.PartID}, "the default group is unchanged")
	require.NoError(t, x.Release(ctx))

	c.stop(3)
	mu.Lock()
	old[3] = false
	mu.Unlock()
	c.start(3)
	c.waitStatus(ctx, "writing log version 10", func(_ uint64, st Status) bool {
		return len(st.Groups) == 2 && writesNewest(st)
	})
	after := newSession(t, ctx, c.node(2))
	_, err = after.Acquire(ctx, "after@a")
	require.NoError(t, err)
	afterPart, ok := after.IDIn("a")
	require.True(t, ok)
	info, err = n.Inspect(ctx, "after@a")
	require.NoError(t, err)
	require.Equal(t, after.ID(), info.SessionID, "a part opened at gate 10 names its session")
	require.Equal(t, afterPart, info.PartID)
	info, err = n.Inspect(ctx, "before@a")
	require.NoError(t, err)
	require.Zero(t, info.SessionID, "a part opened before the raise stays unknown")
	require.Equal(t, beforePart, info.PartID)
}
