package fencelock

import (
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
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

// The examples are for users to copy, tests included, so no examples/
// package (nor its tests) imports a package under internal/, which Go
// would refuse them outside this module: what they need for their tests
// is fencelocktest's. Each package's own imports count; what the packages
// it imports use is theirs.
func TestExamplesImportNothingInternal(t *testing.T) {
	requireNothingInternal(t, "./examples/...", "/examples/")
}

// The integration tests go through the public API and the kit only (see
// integration/doc.go): what needs an unexported name stays in the root.
func TestIntegrationImportsNothingInternal(t *testing.T) {
	requireNothingInternal(t, "./integration/...", "/integration")
}

// requireNothingInternal fails the test if a package matched by pattern
// whose import path, past the module's, starts with under imports a
// package under internal/; at least one such package must exist.
func requireNothingInternal(t *testing.T, pattern, under string) {
	t.Helper()
	const module = "github.com/fencelock/fencelock"
	out, err := exec.Command("go", "list", "-deps", "-test", "-json=ImportPath,Imports", pattern).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("go list: %v\n%s", err, exit.Stderr)
	}
	require.NoError(t, err)
	found := 0
	for dec := json.NewDecoder(strings.NewReader(string(out))); dec.More(); {
		var p struct {
			ImportPath string
			Imports    []string
		}
		require.NoError(t, dec.Decode(&p))
		if !strings.HasPrefix(p.ImportPath, module+under) {
			continue
		}
		found++
		for _, imp := range p.Imports {
			if imp == module+"/internal" || strings.HasPrefix(imp, module+"/internal/") {
				t.Errorf("%s imports %s", p.ImportPath, imp)
			}
		}
	}
	require.Positive(t, found, "go list found no %s package", pattern)
}
