package groupcore

import "github.com/fencelock/fencelock/internal/fsm"

// Status is a group's local view (the root's Status documents it).
type Status struct {
	LeaderID, Term, AppliedIndex, GroupID uint64
	NonVoting, Removed                    bool
	LastSnapshotIndex, ConfigChangeIndex  uint64
	Voters                                map[uint64]string
	// Unreached are the other voters this replica has not heard from
	// lately (reachWindow), sorted; known only where this replica leads the
	// group or the group has no leader (a follower hears from the leader
	// alone), empty elsewhere.
	Unreached []uint64
	// Gate is the versions the group writes, as applied here.
	Gate fsm.Gate
	// Mirror is, on a mirror of a group this host does not run, the
	// replica that feeds it (0 while none does); 0 on a shard.
	Mirror uint64
}
