package gate

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/lockapi"
)

// The versions each group was seen to write are kept in Dir, only ever
// rising, and a build that cannot read them refuses the Dir at start.
func TestVersionRecord(t *testing.T) {
	dir := t.TempDir()
	v, err := Load(dir, []string{"", "jobs"})
	require.NoError(t, err, "no record: a Dir of a build before the gate, or a new one")
	require.NoError(t, v.Keep("", fsm.Gate{Codec: 9, Snapshot: 7}))
	require.NoError(t, v.Keep("", fsm.Baseline), "never lower")
	require.NoError(t, v.Keep("jobs", fsm.Gate{Codec: fsm.CodecVersion() + 1, Snapshot: 7}))
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"version":1,"groups":{"":{"codec":9,"snapshot":7},"jobs":{"codec":%d,"snapshot":7}}}`, fsm.CodecVersion()+1), string(data))

	_, err = Load(dir, []string{""})
	require.NoError(t, err, "a group this replica no longer runs does not matter")
	_, err = Load(dir, []string{"", "jobs"})
	require.ErrorIs(t, err, fsm.ErrVersionTooNew)
	require.ErrorIs(t, err, lockapi.ErrInvalidConfig)
	require.ErrorContains(t, err, fmt.Sprintf(`group "jobs" writes log version %d, snapshot version 7 (as this replica last saw, `, fsm.CodecVersion()+1))
	require.ErrorContains(t, err, fmt.Sprintf("this build reads up to log version %d, snapshot version %d: upgrade this replica", fsm.CodecVersion(), fsm.SnapshotVersion()))

	for _, bad := range []string{"{", `{"version":2,"groups":{}}`} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte(bad), 0o600))
		_, err = Load(dir, []string{""})
		require.ErrorIs(t, err, lockapi.ErrInvalidConfig, bad)
		require.NotErrorIs(t, err, fsm.ErrVersionTooNew, bad)
	}
}
