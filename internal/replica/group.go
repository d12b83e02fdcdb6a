package replica

import (
	"context"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/internal/replica/mirror"
	"github.com/fencelock/fencelock/internal/replica/wire"
)

// Group is one group as this host reaches it, and what Host.Group and
// Host.Lookup return: its two makers are a local shard (*Replica: this host
// votes in the group, or runs a non-voting copy of it) and a mirror
// (*mirror.Mirror: a copy fed by a voter of a group this host does not run,
// package mirror). Each does the job its own way; neither branches on the
// other. What a group applies reaches the Sink it was started with, from
// either.
//
// A call on a Group that this host replaced meanwhile (a mirror stopped
// unused, a shard whose voters moved off, a mirror whose group now runs
// here) is made again on the group's Group of the moment: the same
// command, which the group applies at most once.
type Group interface {
	// Propose applies cmd in the group, retried until ctx ends; see
	// Replica.Propose for its errors.
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	// Read runs q as a linearizable read, failing as Propose does.
	Read(ctx context.Context, q fsm.Query) (any, error)
	// StaleRead runs q on this host's copy of the state, without asking the
	// group; once the copy stopped it fails with ErrClosed or why.
	StaleRead(q fsm.Query) (any, error)
	// Members reads the membership linearizably (a mirror at a voter).
	Members(ctx context.Context) (Membership, error)

	// Status is the local view, without I/O; Status.Mirror names a
	// mirror's server.
	Status() Status
	// Counters are what this host counted of the group (package shard's ops.go).
	Counters() Counters
	// Leader is the leader's ID as last known here; 0 when unknown.
	Leader() uint64
	// GroupID is the group's ID once known here; 0 before.
	GroupID() uint64
	// Gate is the versions the group writes, as applied here.
	Gate() fsm.Gate
	// Name is the group's name, "" for the default group; ShardID its
	// Dragonboat shard ID.
	Name() string
	ShardID() uint64
	// ConfiguredVoters are the group's voters as the group table (or the
	// Config) gives them.
	ConfiguredVoters() []uint64

	// Go runs f in the background unless the group is closing here; Close
	// waits for it. It reports whether f was started.
	Go(f func()) bool
}

var (
	_ Group = (*Replica)(nil)
	_ Group = (*mirror.Mirror)(nil)
)

// Status is a group's local view (the root's Status documents it), and
// Counters, Histogram and Bucket what it counted (package groupcore).
type (
	Status    = groupcore.Status
	Counters  = groupcore.Counters
	Histogram = groupcore.Histogram
	Bucket    = groupcore.Bucket
)

// Sink receives what a group applies, Dropper why it stopped here, and
// Idler whether anything here uses it (package groupcore documents them).
type (
	Sink    = groupcore.Sink
	Dropper = groupcore.Dropper
	Idler   = groupcore.Idler
)

// Membership is the group's membership as of a linearizable read (the
// root's Membership documents the fields): the wire's, as a voter sends it
// to a replica that does not run the group (mirror_members.go).
type Membership = wire.Membership

// FailFast returns ctx marked so that Propose and Read on it fail with the
// no-quorum error (ErrUnavailable and ErrNoQuorum) as soon as a call with a
// deadline would, even if ctx has no deadline. A caller's own request (an
// Acquire or a Campaign, which may wait long for its lock but not for a
// group that has lost its quorum) is marked so: a context without a
// deadline must not turn "wait for the lock" into "wait, silent, until an
// operator brings the voters back". Work that must finish whatever happens
// meanwhile (a withdrawal, a close) stays unmarked.
func FailFast(ctx context.Context) context.Context { return groupcore.FailFast(ctx) }
