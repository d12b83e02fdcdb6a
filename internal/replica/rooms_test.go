package replica

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The rooms cut out of this package sit below it: each imports the standard
// library and the few packages its map comment names, never this package,
// Dragonboat (but the transport interfaces the gate's screen wraps, and the
// shard, which is a Dragonboat shard) nor the session layer, so that the
// host can import them, a change to the machinery above cannot reach into
// a format below it (the wire's bytes, the Dir's files) or into what both
// makers of a group share, the mirror reaches its host only through
// mirror.Host, the shard only through shard.Host, the group table only
// through grouptable.Host, and the serving side
// reaches the host's shards only through serve.Host and serve.Group.
func TestRoomsBelowImportOnlyTheirOwn(t *testing.T) {
	const module = "github.com/fencelock/fencelock/"
	rooms := map[string][]string{
		"wire":      {module + "internal/fsm"},
		"datadir":   {module + "internal/peering", module + "lockapi"},
		"groupcore": {module + "internal/fsm", module + "lockapi"},
		// The mirror is fed over the transport's call connections: it runs
		// a group's copy, not a Dragonboat shard.
		"mirror": {module + "internal/fsm", module + "internal/replica/groupcore", module + "internal/replica/wire",
			module + "internal/seeded", module + "lockapi", module + "transport"},
		// The serving side answers other replicas' calls from a shard it
		// reaches only through serve.Group.
		// The version gate's screen wraps Dragonboat's transport: its
		// interfaces, and no NodeHost.
		"gate": {module + "internal/fsm", module + "internal/peering", module + "internal/replica/datadir", module + "lockapi",
			"github.com/lni/dragonboat/v4/config", "github.com/lni/dragonboat/v4/raftio", "github.com/lni/dragonboat/v4/raftpb"},
		"serve": {module + "internal/fsm", module + "internal/peering", module + "internal/replica/groupcore",
			module + "internal/replica/wire", module + "transport"},
		// The shard is a Dragonboat shard on the host's NodeHost: it
		// imports Dragonboat, and the rooms beside it it uses (the Core it
		// shares with a mirror, the gate's names, the mirrors it feeds, the
		// membership it reads), never the host's package.
		"shard": {module + "internal/clock", module + "internal/expiry", module + "internal/fsm", module + "internal/proposer",
			module + "internal/replica/gate", module + "internal/replica/groupcore", module + "internal/replica/serve",
			module + "internal/replica/wire", module + "internal/testhook", module + "lockapi",
			"github.com/lni/dragonboat/v4", "github.com/lni/dragonboat/v4/config", "github.com/lni/dragonboat/v4/raftio"},
		// The group table's watcher and operations run on the shards the
		// host hands them (the default group's, which holds the table, and
		// a group's), start and stop groups only through grouptable.Host,
		// read a membership through the wire's type, and name Dragonboat's
		// Membership; never the host's package.
		"grouptable": {module + "internal/fsm", module + "internal/replica/shard", module + "internal/replica/wire",
			module + "lockapi", "github.com/lni/dragonboat/v4"},
	}
	for room, allowed := range rooms {
		files, err := filepath.Glob(filepath.Join(room, "*.go"))
		require.NoError(t, err)
		var sources []string
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				sources = append(sources, f)
			}
		}
		require.NotEmpty(t, sources, "room %s has no files", room)
		for _, f := range sources {
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range file.Imports {
				path, err := strconv.Unquote(imp.Path.Value)
				require.NoError(t, err)
				require.NotEqual(t, module+"internal/replica", path, "%s imports the package above its room", f)
				std := !strings.Contains(strings.Split(path, "/")[0], ".")
				require.True(t, std || slices.Contains(allowed, path), "%s imports %s: room %s may import the standard library and %v", f, path, room, allowed)
			}
		}
	}
}
