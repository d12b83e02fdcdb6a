package shard

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

func TestGatedError(t *testing.T) {
	e := &gatedError{kind: fsm.KindGate, need: 9, group: "jobs", writes: fsm.Baseline,
		waiting: []string{"replica 2 (not heard from)", "replica 3 (reads up to 8)"}}
	require.ErrorIs(t, e, fsm.ErrVersionGated)
	require.EqualError(t, e, `fencelock: the group does not write the log version this needs yet: gate needs log version 9; `+
		`group "jobs" writes log version 8 until every member reads 9; it waits for replica 2 (not heard from), replica 3 (reads up to 8): upgrade them`)
	e.waiting = nil
	require.ErrorContains(t, e, "every member reads it now, and the group's leader raises the gate within seconds")
	e.unread = true
	require.ErrorContains(t, e, "its membership could not be read")
}
