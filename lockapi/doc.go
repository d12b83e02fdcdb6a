// Package lockapi is fencelock's shared vocabulary: what an embedded
// replica (package fencelock), its HTTP service (httpapi) and a remote
// client (client, the CLI) must agree on, and nothing that runs a group.
//
//	fencelock, httpapi ──┐
//	client, cmd/fencelock ┴──▶ lockapi (errors, Fence, Locker and its options, views, names, wire types)
//
// It imports the standard library only, so a program that talks to the
// service through package client links no raft, storage or cgo (a test in
// package client guards that). Package fencelock re-exports every name here
// under the same name and value: errors.Is(err, fencelock.ErrLocked) and
// errors.Is(err, lockapi.ErrLocked) are the same test.
package lockapi
