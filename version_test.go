package fencelock

import (
	"fmt"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

// The Version comes from the build information: the module's version where
// the library is the main module or a dependency (replaced or not), the VCS
// revision only where it is the main module, "devel" where nothing says;
// the formats are the ones this build writes; Status and Stats carry it.
func TestVersionOf(t *testing.T) {
	formats := func(v Version) Version { v.Codec, v.Snapshot = fsm.CodecVersion(), fsm.SnapshotVersion(); return v }
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "169f951"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		what string
		bi   *debug.BuildInfo
		want Version
	}{
		{"no build info", nil, formats(Version{Version: "devel"})},
		{"main, devel, from a dirty checkout", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}, Settings: vcs},
			formats(Version{Version: "devel", Commit: "169f951+dirty"})},
		{"main, released", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v1.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}},
			formats(Version{Version: "v1.4.0", Commit: "abc"})},
		{"a dependency", &debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "v2.0.0"}, Settings: vcs,
			Deps: []*debug.Module{{Path: "example.com/other", Version: "v9.9.9"}, {Path: modulePath, Version: "v1.3.1"}}},
			formats(Version{Version: "v1.3.1"})},
		{"a dependency replaced by a local path", &debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v1.3.1", Replace: &debug.Module{Path: "../fencelock"}}}},
			formats(Version{Version: "devel"})},
		{"not linked in", &debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}}, formats(Version{Version: "devel"})},
	} {
		require.Equal(t, tc.want, versionOf(tc.bi), tc.what)
	}
	v := BuildVersion()
	require.NotEmpty(t, v.Version)
	require.Equal(t, fsm.CodecVersion(), v.Codec)
	require.Equal(t, fsm.SnapshotVersion(), v.Snapshot)
	require.Contains(t, v.String(), fmt.Sprintf("log format %d, snapshot format %d", v.Codec, v.Snapshot))

	// Status says it too.
	c := newCluster(t, 1, nil)
	require.Equal(t, v, c.node(1).Status().Version)
	require.Equal(t, v, c.node(1).Stats().Version)
}
