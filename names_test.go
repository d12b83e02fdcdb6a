package fencelock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

// A grant or queued request from before the group recorded times (an
// entry of codec version 5 or older, replayed or restored) shows no name
// and an unknown time: the zero Time, no hold time; never 1970.
func TestUnknownGrantTime(t *testing.T) {
	info := lockInfo(fsm.LockInfo{Name: "old", Held: true, Token: 7, Session: 3,
		Holders: []fsm.Holder{{Session: 3, Token: 7, Owner: 1}}})
	require.True(t, info.GrantedAt.IsZero())
	require.True(t, info.Holders[0].GrantedAt.IsZero())
	require.Zero(t, info.Holders[0].HeldFor(time.Now()))
	require.Empty(t, info.Holders[0].Name)
	require.Nil(t, waiters("old", nil))
	w := waiters("old", []fsm.Waiter{{Session: 4, Place: 1}})
	require.True(t, w[0].QueuedAt.IsZero())
	l := leaderInfo(fsm.ElectionInfo{Name: "e", Led: true, Token: 9, Session: 3})
	require.True(t, l.ElectedAt.IsZero())
}

// The views' exact comparisons written before sessions had names compare
// what they always did: these check that the names and times are there
// (the default name, a grant time), then clear them.

func unnamedLeader(t testing.TB, l LeaderInfo) LeaderInfo {
	t.Helper()
	if l.Token != 0 {
		require.NotEmpty(t, l.SessionName)
		require.False(t, l.ElectedAt.IsZero(), "no election time")
	}
	l.SessionName, l.ElectedAt = "", time.Time{}
	return l
}

// SplitName is the rule every call routes a name by: the group is what
// follows the last '@', the default group's names have none, and a name
// ending in '@' is in no group.
func TestSplitName(t *testing.T) {
	for name, want := range map[string]struct {
		base, group string
		ok          bool
	}{
		"job":                  {"job", "", true},
		"":                     {"", "", true},
		"jobs/reindex@billing": {"jobs/reindex", "billing", true},
		"a@b@c":                {"a@b", "c", true}, // after the last '@'
		"mail@example.com@eu":  {"mail@example.com", "eu", true},
		"x@":                   {"x", "", false}, // the default group has no name to write
		"@":                    {"", "", false},
		"@billing":             {"", "billing", true},
	} {
		base, group, ok := SplitName(name)
		require.Equal(t, want, struct {
			base, group string
			ok          bool
		}{base, group, ok}, name)
	}
}
