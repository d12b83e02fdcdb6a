package fencelock

import (
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/fencelock/fencelock/internal/session"
)

// Version says what a replica runs: the build of this library, and the
// formats of the log entries and snapshots it writes. Replicas of one group
// can run different builds (while they are upgraded one at a time); compare
// the Versions of each replica's Status to see which runs what.
type Version struct {
	// Version is the fencelock module's version as the Go toolchain
	// stamped it into the binary: a release ("v1.4.0") or a
	// pseudo-version of the commit it was built from, or what the build
	// set with -ldflags -X (see linkedVersion). "devel" when the build
	// carries none (go run, a test, a replaced module on a local path).
	Version string
	// Commit is the VCS revision the binary was built from ("+dirty" when
	// the tree had uncommitted changes), known only when fencelock is the
	// binary's main module, as in the fencelock command; "" otherwise (an
	// embedder's binary is stamped with the embedder's revision, not the
	// library's: Version names the library's).
	Commit string
	// Codec is the newest version of the log entry format this build
	// reads (every version from 1 up to Codec); it writes it once its
	// group's version gate allows, that is once every member of the group
	// reads it (GroupStatus.Writes).
	Codec int
	// Snapshot is the newest version of the snapshot format this build
	// restores (every version from 1 up to Snapshot); it writes it once its
	// group's version gate allows.
	Snapshot int
}

// String is the Version in one line, for logs and the command line.
func (v Version) String() string {
	s := "fencelock " + v.Version
	if v.Commit != "" {
		s += " (commit " + v.Commit + ")"
	}
	return s + fmt.Sprintf(", reads log format %d, snapshot format %d", v.Codec, v.Snapshot)
}

// BuildVersion returns the Version of this binary. It never fails: what
// the build information does not tell is "devel" (Version) or "" (Commit).
func BuildVersion() Version { return buildVersion() }

// The build information cannot change while the process runs; Status is
// documented as free of I/O and cheap, so it is read once.
var buildVersion = sync.OnceValue(func() Version {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	v := versionOf(bi)
	if linkedVersion != "" {
		v.Version = linkedVersion
	}
	if linkedCommit != "" {
		v.Commit = linkedCommit
	}
	return v
})

// linkedVersion and linkedCommit, when set at link time
// (-ldflags "-X github.com/fencelock/fencelock.linkedVersion=v1.4.0 -X
// github.com/fencelock/fencelock.linkedCommit=..."), are the Version's
// Version and Commit: a build whose sources carry no VCS metadata (a
// container build, whose context leaves .git out) says what it is so.
var linkedVersion, linkedCommit string

// modulePath is this library's module, looked up in the build information.
const modulePath = "github.com/fencelock/fencelock"

// versionOf reads the Version from bi; a nil bi (a binary built without
// module support) yields "devel" and no commit.
func versionOf(bi *debug.BuildInfo) Version {
	v := Version{Version: "devel", Codec: session.CodecVersion(), Snapshot: session.SnapshotVersion()}
	if bi == nil {
		return v
	}
	var mod *debug.Module
	if bi.Main.Path == modulePath {
		mod = &bi.Main
	} else {
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				mod = d
				break
			}
		}
	}
	if mod != nil && mod.Replace != nil {
		mod = mod.Replace
	}
	if mod != nil && mod.Version != "" && mod.Version != "(devel)" {
		v.Version = mod.Version
	}
	if bi.Main.Path == modulePath {
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if v.Commit != "" && dirty {
			v.Commit += "+dirty"
		}
	}
	return v
}
