// Package replica runs one replica of a fencelock group on Dragonboat. The
// root package holds the API (sessions, locks, elections) and nothing of
// the machinery; this package is the machinery, and with its shard (package
// shard, below) and fsm's adapter the only one that imports Dragonboat
// (the gate's screen imports its transport interfaces).
//
// A map of the package:
//
//   - group.go: Group, a group as this host reaches it, and what
//     Host.Group and Host.Lookup return. Its two makers are the shard
//     (package shard; Replica here, an alias of shard.Shard) and the mirror
//     (package mirror); each does the job its own way, and neither
//     branches on the other nor holds the other; what they share (name,
//     voters, Sink, applied index, group ID, gate, counters, lifecycle) is
//     a groupcore.Core each embeds. The session layer (internal/session)
//     reaches groups through its own interface of the same role, which
//     both satisfy.
//   - host.go: Config, Start and Close: one Dragonboat NodeHost per process,
//     its transport, its Dir and its listeners, and one Replica (one shard)
//     per group on it: the default group and each Config.Groups entry.
//   - replica.go: this map, and the name Replica.
//   - host_shards.go: the host's side of its shards (package shard,
//     below): making them (newReplica), handing each Dragonboat's leader
//     and system events for its shard, the screen that refuses a replica
//     whose Dir is an older copy of itself (the shard's oldcopy.go says
//     why), the one retry of a call whose Group was replaced meanwhile
//     (Host.replaced), which shard and mirror share, and its answers to
//     the calls a shard makes of its host (shard.Host, through shardHost).
//   - groups.go: named groups: their shard IDs, their identity kept in Dir,
//     the non-voting replicas every host runs of the groups it does not
//     vote in, and the removal check.
//   - host_table.go: the host's side of the group table (package
//     grouptable, below): the exported CreateGroup, DropGroup, SetVoters,
//     ReplaceReplica, GroupTable and Reachable, each a call into it, and
//     its answers to the calls the table makes of its host
//     (grouptable.Host, through tableHost). table.go: what following the
//     table does to the host's own state: starting a group's shard here
//     (startGroup), stopping one for good (stopGroup, and mirrorAfter
//     when a mirror takes over), the groups kept in Dir, and this host's
//     Config.Groups as the table's seed (seedSpecs).
//   - balance.go: Host.TransferLeadership, and the balancer that spreads
//     the groups' leaders over the hosts by rate-limited transfers (the
//     transfer itself is the shard's).
//   - identity.go: the default group's identity kept in Dir, and the
//     host's side of the handshake (internal/peering) for every group it
//     runs (the no-quorum warning is the shard's).
//   - versions.go: the version gate as the host takes part in it: what
//     each peer reads, the refusal of a peer that cannot read what a group
//     writes, the versions kept in Dir, and the host's answers to the
//     gate's screen (screenHost). The leader's raise and the refusal of a
//     command the group cannot write yet are the shard's (its
//     versions.go); the parts that need no shard are package gate's.
//   - placement.go: Placement, which named groups a host runs a shard of,
//     and what its peers announced of theirs.
//   - host_mirrors.go: the host's side of its mirrors (package mirror,
//     below): making, finding and retiring them, and its answers to the
//     calls a mirror makes of its host (mirror.Host, through mirrorHost).
//   - host_serve.go: the host's answers to the serving side (package
//     serve, below): finding a shard of a named group (serve.Host, through
//     servedHost), what a call needs of it (serve.Group, through
//     servedShard: its state with a subscriber registered at once,
//     propose, read, membership, export), and what an error means to the
//     caller (wireCode). mirror_members.go: a mirror's membership read at
//     a voter, the caller's side.
//   - mirror_swap.go: a mirror and a shard of one group taking over from
//     each other as the group table moves the group's voters.
//   - backup.go: a group's exported copy (the shard writes the snapshot)
//     and a restore's import; exportgroup.go every group's copy for a
//     backup, from a voter over a call connection for a group this host
//     does not run (the voter's side is package serve's).
//
// Rooms of their own, below this package (none imports it):
//
//   - wire (internal/replica/wire): the bytes of a call connection between
//     two replicas: a mirror's subscription, a backup's export, a
//     membership read. Pure encode and decode, fixed by golden bytes; the
//     mirror and the serving side both import it.
//   - shard (internal/replica/shard): the shard, Group's first maker: one
//     group's replica as one Dragonboat shard on the host's NodeHost: its
//     proposer, expiry timers, Propose and Read with their retries, what
//     it applies, its membership changes and leadership transfers, its
//     part in the version gate, and Status, the local view without I/O.
//     It asks its host only what shard.Host names, and the host reaches it
//     through its exported methods.
//   - grouptable (internal/replica/grouptable): the group table as a
//     host follows and changes it: the table as last read here, the
//     watcher that follows it (starts and stops groups through its host,
//     seeds it from Config.Groups), the moves of a group's voters on its
//     leader (MoveVoters, caughtUp, TableRemoves), and its operations
//     (CreateGroup, DropGroup with its drain and seal, SetVoters,
//     ReplaceReplica). It asks its host only what grouptable.Host names,
//     and the host reaches it through Table's exported methods.
//   - mirror (internal/replica/mirror): the mirror, Group's second maker:
//     a group this host does not run, reached through a replica that does
//     (its proposals, reads, events). It asks its host only what
//     mirror.Host names, and the host reaches it through its methods.
//   - serve (internal/replica/serve): what a voter does for a replica
//     that does not run a group, over the transport's call connections:
//     feed a mirror (its state, then every entry applied, and its
//     proposals and reads), export the group's copy for a backup, read
//     its membership; each call bounded and refused with a code the
//     caller acts on. It reaches the host only through serve.Host and
//     serve.Group; the shard's apply observer publishes to its
//     Subscribers.
//   - gate (internal/replica/gate): the version gate's parts that need no
//     shard: what a peer's Hello says it reads, the versions each group
//     was seen to write kept in Dir (a build that cannot read them
//     refuses to start), and the screen on the host's Dragonboat
//     transport that sends no peer what it cannot read, which asks the
//     host only what gate.Host names.
//   - groupcore (internal/replica/groupcore): what the two makers of Group
//     share, a Core each embeds, and the role's vocabulary (Sink, Status,
//     Counters), which this package names under the same names.
//   - datadir (internal/replica/datadir): the Dir as fencelock keeps it
//     beside Dragonboat's files: bounded reads and crash-safe writes of its
//     small files, one replica per Dir in a process, the undoing of a
//     failed start, and the Dir ID a peer's handshake checks. host.go,
//     identity.go and the files of the group table, the version gate and
//     the backup keep their own files through it.
//
// Data flows one way: the root proposes commands and reads queries
// (root → session → a Group here → fsm), and what is applied flows back
// through one Sink per group. A shard is one Dragonboat shard; every
// group of a process shares the Host's NodeHost, so its transport, log
// store and disk writes.
package replica

import (
	"github.com/fencelock/fencelock/internal/replica/shard"
)

// defaultShard is the default group's shard ID inside Dragonboat (package
// shard's DefaultShard).
const defaultShard = shard.DefaultShard

// maxQueue bounds, in bytes of entries, the messages queued to each peer
// and those received and not yet handled (Dragonboat's defaults are
// unlimited). Past it, messages are dropped and raft resends them. Like
// the shard's bound on its in-memory log (package shard), it is checked
// before a message is queued, so one message larger than the limit still
// passes when the queue is empty: it bounds memory without ever blocking
// progress.
const maxQueue = 128 << 20

// Replica is one running replica of one group, the shard (package shard):
// the name the root and the session layer know it by.
type Replica = shard.Shard
