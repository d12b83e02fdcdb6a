package checker

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A probe that has not granted halfway to its bound leaves every
// goroutine's stack for the reader, at most maxStackDumps times a run, in
// files CI keeps but does not print.
func TestProbeStacksAreKept(t *testing.T) {
	t.Setenv("FENCELOCK_CHECKER_DUMP", t.TempDir())
	d := &dumps{scenario: "s"}
	for range maxStackDumps + 1 {
		d.stacks(2, "a", time.Now().Add(-10*time.Second), "[1: leader 1]")
	}
	files := d.files()
	require.Len(t, files, maxStackDumps)
	for _, f := range files {
		require.True(t, strings.HasSuffix(f, ".stacks"), f)
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Contains(t, string(b), "probe of replica 2 in group \"a\", not granted since")
		require.Contains(t, string(b), "the group as each replica sees it: [1: leader 1]")
		require.Contains(t, string(b), "TestProbeStacksAreKept")
	}
}
