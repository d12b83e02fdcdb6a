package fencelock

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/session"
)

// The root is a front door: data flows root -> internal/session ->
// internal/replica -> internal/fsm, so no file of the root's (for any
// platform: build constraints are not applied) imports internal/fsm. Its
// tests may.
func TestRootImportsNoStateMachine(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	imports := map[string][]string{} // import path -> the root files importing it
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range file.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			imports[path] = append(imports[path], f)
		}
	}
	// The scan sees the root's imports: the front door calls the session
	// package, whose own import of the state machine is its business.
	require.Contains(t, imports, "github.com/fencelock/fencelock/internal/session")
	fsmPath := "github.com/fencelock/fencelock/internal/fsm"
	require.Empty(t, imports[fsmPath], "root files that import internal/fsm")
	for path, in := range imports {
		require.False(t, strings.HasPrefix(path, fsmPath+"/"), "%v import %s", slices.Sorted(slices.Values(in)), path)
	}
}

// The root's constants that mirror the state machine's limits are the
// state machine's, whatever package they are named through.
func TestLimitsAreTheStateMachines(t *testing.T) {
	for name, c := range map[string][2]int64{
		"MaxSessions":          {MaxSessions, fsm.MaxSessions},
		"MaxLocksPerSession":   {MaxLocksPerSession, fsm.MaxLocksPerSession},
		"MaxWaitersPerLock":    {MaxWaitersPerLock, fsm.MaxWaitersPerLock},
		"MaxPendingPerSession": {MaxPendingPerSession, fsm.MaxPendingPerSession},
		"MaxHoldersPerLock":    {MaxHoldersPerLock, fsm.MaxHoldersPerLock},
		"MaxNameLen":           {MaxNameLen, fsm.MaxNameLen},
		"MaxValueLen":          {MaxValueLen, fsm.MaxValueLen},
		"MaxSessionNameLen":    {MaxSessionNameLen, fsm.MaxSessionNameLen},
		"MaxContended":         {MaxContended, fsm.MaxContended},
		"MaxLockDelay":         {int64(MaxLockDelay), fsm.MaxLockDelay},
		"MaxHoldLimit":         {int64(MaxHoldLimit), fsm.MaxHoldLimit},
	} {
		require.Equal(t, c[1], c[0], name)
	}
	require.Equal(t, fsm.CodecVersion(), BuildVersion().Codec)
	require.Equal(t, fsm.SnapshotVersion(), BuildVersion().Snapshot)
	// The listing sizes are the front door's own.
	require.Equal(t, [3]int{1000, 10000, 16}, [3]int{DefaultListLimit, MaxListLimit, QueueListed})
	require.Equal(t, session.MaxListLimit, MaxListLimit)
}
