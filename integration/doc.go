// Package integration holds fencelock's multi-replica tests that go
// through the public API only: groups of replicas started with the public
// test kit (fencelocktest.NewCluster), partitioned, crashed, restarted and
// restored as a user's own tests would, and asserting what the exported
// API shows (fencelock.Node, Session, Lock, Status, the errors). It is to
// the root what etcd's tests/integration is to its packages: apart from the
// unit tests, so that the root's tests stay within go test's time, and
// written so that a test can be copied out of this module.
//
// What lives here, a file per theme:
//
//   - locks, elections and leader loops across replicas, a grant's context
//     (lock, election, leaderloop, watch, position, recipes, revoke);
//   - what the views show: the listings of locks, sessions, elections and
//     contention, and the session names in them (views);
//   - session leases: keep-alives, expiry, lock-delay, the safety margin
//     (lease);
//   - quorum loss and failover, crashes and restarts, handover on Close, a
//     mirror leaving a voter cut off from its group (noquorum, failover,
//     resume);
//   - named groups: online, done, unknown (groups), their IDs and views
//     (groups_views), a grant's group ID and fencing per group (fence);
//   - deployments refused or restored: a Dir copied back, a changed
//     address, a misconfigured peer, a failed start, a backup restored
//     (misconfig);
//   - what a deployment logs and traces (telemetry).
//
// What stays in the root (package fencelock): tests that need unexported
// names — the state machine's own reads (internal/fsm), test hooks
// (internal/testhook: a frozen or paused process, a replaced clock, applied
// events), the host's internals (the group table, the balancer, mirrors,
// log shards), the TCP transport's own tests (TLS, forged frames) — and
// unit tests of one file's code. A test moves here once it needs none of
// them; the kit grows a general method when a test needs one it lacks.
//
// This package has no code of its own: its files are tests
// (package integration_test).
package integration
