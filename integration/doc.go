// Package integration holds fencelock's multi-replica tests that go
// through the public API only: groups of replicas started with the public
// test kit (fencelocktest.NewCluster), partitioned, crashed, restarted and
// restored as a user's own tests would, and asserting what the exported
// API shows (fencelock.Node, Session, Lock, Status, the errors). It is to
// the root what etcd's tests/integration is to its packages: apart from the
// unit tests, so that the root's tests stay within go test's time, and
// written so that a test can be copied out of this module.
//
// What lives here:
//
//   - locks, elections and leader loops across replicas (lock, election,
//     leaderloop, watch, position, recipes, revoke, delay, renew, lease,
//     names, list);
//   - quorum loss and failover, crashes and restarts, handover on Close
//     (noquorum, noquorum_wait, failover, handover, resume, context);
//   - named groups online, their IDs and views, fencing per group, a
//     mirror leaving a voter cut off from its group (groups_*, firstgrant,
//     unknowngroup, fence, fencevalue, mirror_failover);
//   - deployments refused or restored: a Dir copied back, a changed
//     address, a misconfigured peer, a backup restored
//     (oldcopy, changedaddr, misconfig, startfail, backup);
//   - what a deployment logs and traces (log, trace).
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
