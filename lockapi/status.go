package lockapi

import "encoding/json"

// StatusJSON answers GET /v1/status: one replica's local view, without a
// round of the group (a replica cut off from the others answers it too,
// with what it last knew). The fields above Groups are the default
// group's.
type StatusJSON struct {
	ReplicaID    uint64 `json:"replica_id"`
	LeaderID     uint64 `json:"leader_id"` // 0: no leader known
	IsLeader     bool   `json:"is_leader"`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	GroupID      string `json:"group_id"`
	// Voters and NonVoting map a replica ID (decimal) to its raft address.
	Voters    map[string]string `json:"voters"`
	NonVoting map[string]string `json:"non_voting"`
	Sessions  int               `json:"sessions"`
	LocksHeld int               `json:"locks_held"`
	Waiters   int               `json:"waiters"`
	// Unreachable are the voters this replica has not heard from in the
	// last few election timeouts: down, or cut off from it. Known on the
	// leader, and on every replica while the group has no leader; empty on
	// a follower (fencelock.Status.Unreached). It lags a replica's death by
	// a few election timeouts.
	Unreachable []uint64 `json:"unreachable"`
	// HTTPSessions counts the sessions this replica's API owns.
	HTTPSessions int `json:"http_sessions"`
	// Groups are every group this replica runs, the default group (name
	// "") first.
	Groups []GroupJSON `json:"groups"`
	// Mirrors are the groups this replica reaches through a mirror, fed by
	// one of their voters (fencelock.Status.Mirrors): GroupJSON.Mirror
	// names it. Empty from a server of a build before placement.
	Mirrors []GroupJSON `json:"mirrors"`
	// FollowsGroupTable is true once this replica runs the named groups
	// the group table lists, rather than its own Config.Groups
	// (fencelock.Status.FollowsGroupTable); it never turns false again.
	// False from a server of a build before it was shown.
	FollowsGroupTable bool `json:"follows_group_table"`
	// Version is what this replica runs: build and log formats.
	Version VersionJSON `json:"version"`
	// Writes is the log and snapshot formats the default group writes
	// (fencelock.Status.Writes, its version gate); zero from a server of a
	// build before the gate.
	Writes FormatsJSON `json:"writes"`
	// Raw is the answer as the replica sent it, fields a reader does not
	// know included, where the reader keeps it (the Go client's Status and
	// Replicas do): what a tool prints for `-o json`. It is never written.
	Raw json.RawMessage `json:"-"`
}

// GroupJSON is one group a replica runs, in StatusJSON.Groups (or one it
// mirrors, in StatusJSON.Mirrors).
type GroupJSON struct {
	Name        string   `json:"name"` // "": the default group
	GroupID     string   `json:"group_id"`
	LeaderID    uint64   `json:"leader_id"` // 0: no leader known
	IsLeader    bool     `json:"is_leader"`
	NonVoting   bool     `json:"non_voting"`
	Voters      []uint64 `json:"voters"`
	Term        uint64   `json:"term"`
	LocksHeld   int      `json:"locks_held"`
	Unreachable []uint64 `json:"unreachable"` // the group's voters this replica does not reach
	// Writes is the log and snapshot formats the group writes
	// (fencelock.GroupStatus.Writes): its version gate; zero from a server
	// of a build before the gate.
	Writes FormatsJSON `json:"writes"`
	// Mirror is, in StatusJSON.Mirrors, the voter feeding this replica's
	// mirror of the group; 0 while none does.
	Mirror uint64 `json:"mirror,omitempty"`
}

// VersionJSON is what a replica runs (fencelock.Version), in GET
// /v1/status and `fencelock version -o json`.
type VersionJSON struct {
	// Version is the fencelock module's version, "devel" when the build
	// carries none.
	Version string `json:"version"`
	// Commit is the VCS revision of the build; empty when unknown.
	Commit string `json:"commit,omitempty"`
	// Codec and Snapshot are the newest log entry and snapshot format
	// versions the replica reads (every version from 1 up to each); what
	// each group writes is its "writes".
	Codec    int `json:"codec"`
	Snapshot int `json:"snapshot"`
}

// FormatsJSON is the formats a group writes (fencelock.Formats): its
// version gate, the format of its log entries and of its snapshots.
type FormatsJSON struct {
	Codec    int `json:"codec"`
	Snapshot int `json:"snapshot"`
}
