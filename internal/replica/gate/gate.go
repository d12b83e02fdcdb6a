// Package gate is the part of the version gate (internal/fsm/version.go)
// that needs no group's shard: what a peer's Hello says it reads
// (Announced), the versions each group was seen to write, kept in Dir so
// that a build that cannot read them refuses to start (Record), and the
// screen on the host's Dragonboat transport that sends no peer an entry
// or a snapshot of a newer version than it announced (Screen). The
// leader's raise of a group's gate and the refusal of a command the group
// cannot write yet stay with the shard (internal/replica's versions.go).
//
// A map of the package:
//
//   - gate.go: Announced, and GroupName, a group in the words of a
//     message.
//   - record.go: Record, the versions file in Dir.
//   - screen.go: Screen, which asks its host only what Host names: what a
//     peer reads, what a group writes, and whom to tell of an entry held
//     back.
//
// It imports internal/fsm for the gate's versions, internal/peering for
// the Hello, internal/replica/datadir for Dir's files, lockapi for
// ErrInvalidConfig, and Dragonboat's transport interfaces (config,
// raftio, raftpb) that the screen wraps; nothing of internal/replica.
package gate

import (
	"fmt"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/peering"
)

// Announced returns what a Hello says its replica reads; a field it leaves
// out is the baseline's.
func Announced(h peering.Hello) fsm.Gate {
	g := fsm.Baseline
	if h.Codec != 0 {
		g.Codec = int(h.Codec)
	}
	if h.Snapshot != 0 {
		g.Snapshot = int(h.Snapshot)
	}
	return g
}

// GroupName is group name in the words of a message: "the default group"
// for "", else group "name".
func GroupName(name string) string {
	if name == "" {
		return "the default group"
	}
	return fmt.Sprintf("group %q", name)
}
