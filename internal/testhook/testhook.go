// Package testhook lets fencelock's own tests, benchmark and quickstart
// simulate a frozen client or a jumping clock, and read a few internal
// figures, without widening the public API: the root package registers the
// implementations at init.
package testhook

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// These are set by package fencelock.
var (
	freeze   func(session any, frozen bool)
	pause    func(session any, paused bool)
	useClock func(config any, c clock.Clock)
)

// Register installs Freeze and Thaw; only package fencelock calls it.
func Register(f func(session any, frozen bool)) { freeze = f }

// RegisterPause installs Pause and Resume; only package fencelock calls it.
func RegisterPause(f func(session any, paused bool)) { pause = f }

// RegisterClock installs UseClock; only package fencelock calls it.
func RegisterClock(f func(config any, c clock.Clock)) { useClock = f }

// Freeze simulates a process pause of a *fencelock.Session's holder (a long
// GC pause, a stopped VM): the session stops everything it does in the
// background, keep-alives and the close of a dead session, so the group
// hears nothing more from it. Calls the application makes still run, and
// the session's deadline timer still closes Done on time.
func Freeze(session any) { freeze(session, true) }

// Thaw ends the pause started by Freeze.
func Thaw(session any) { freeze(session, false) }

// Pause simulates a stop-the-world pause of the whole holder process as a
// *fencelock.Session sees it: on top of Freeze, its deadline timer does not
// fire and the news the group sends it (grants, frees, its own expiry) wait,
// so nothing closes Done until Resume, however long the pause lasts. The
// test stands for the paused application goroutines: it makes no calls on
// the session meanwhile.
func Pause(session any) { pause(session, true) }

// Resume ends a Pause: what waited happens now, as when a paused process
// wakes up.
func Resume(session any) { pause(session, false) }

// UseClock makes the replica started with *fencelock.Config config take time
// from c: its leader-side expiry timers and its sessions' deadlines.
func UseClock(config any, c clock.Clock) { useClock(config, c) }

var lastKeepAlive func(session any) time.Time

// RegisterLastKeepAlive installs LastKeepAlive; only package fencelock calls it.
func RegisterLastKeepAlive(f func(session any) time.Time) { lastKeepAlive = f }

// LastKeepAlive returns when the last keep-alive (or the open) of a
// *fencelock.Session that the group acknowledged was sent, by the holder's
// clock: the session's group-side TTL runs from a moment after it.
func LastKeepAlive(session any) time.Time { return lastKeepAlive(session) }

// Snapshots describes the snapshots a replica saved and restored.
type Snapshots struct {
	Saves, Restores int
	LastSave        time.Duration // time to write the last snapshot
	LastSaveBytes   int64
	LastSaveIndex   uint64
	LastRestore     time.Duration // time to read and rebuild the state from the last snapshot
	RestoredIndex   uint64        // log index of the last snapshot restored
}

var snapshots func(node any) Snapshots

// RegisterSnapshots installs SnapshotStats; only package fencelock calls it.
func RegisterSnapshots(f func(node any) Snapshots) { snapshots = f }

// SnapshotStats reports the snapshots of a *fencelock.Node.
func SnapshotStats(node any) Snapshots { return snapshots(node) }

var crash func(ctx context.Context, node any) (lost uint64)

// RegisterCrash installs Crash; only package fencelock calls it.
func RegisterCrash(f func(ctx context.Context, node any) (lost uint64)) { crash = f }

// Crash stops a *fencelock.Node as the death of its process would, where
// Node.Close is a clean shutdown: it dies when its log store holds a
// commit index it defers (at once, or at the next; at the latest when ctx
// ends), cut off from its peers from that moment, and the store drops that
// commit index instead of writing it (internal/logstore), so a restart on
// the same Dir finds the older commit index on disk. Sessions end locally,
// as they do on Close: nothing is closed at the group either way. It
// returns how many deferred raft states (commit indexes) the crash lost: 0
// when ctx ended first and the last save had written everything.
func Crash(ctx context.Context, node any) (lost uint64) { return crash(ctx, node) }

// Applied is what a replica applied: the entry at Index of group Group
// ("" is the default group), its commands and the events they made. The
// slices are the hook's own.
type Applied struct {
	Group  string
	Index  uint64
	Cmds   []fsm.Command
	Events []fsm.Event
}

var observeApplied func(config any, f func(Applied))

// RegisterObserveApplied installs ObserveApplied; only package fencelock
// calls it.
func RegisterObserveApplied(f func(config any, f func(Applied))) { observeApplied = f }

// ObserveApplied makes the replica started with *fencelock.Config config
// call f with every entry it applies, in every group, on its apply
// goroutine (f must not block). A restart replays what its snapshot does
// not cover, so an entry may be reported more than once; a snapshot
// received from a peer is not reported entry by entry. The fault checker
// reads the group's decisions from it: which calls of unknown outcome took
// effect, and which grants an operator ended.
func ObserveApplied(config any, f func(Applied)) { observeApplied(config, f) }

var announce func(config any, reads fsm.Gate)

// RegisterAnnounce installs Announce; only package fencelock calls it.
func RegisterAnnounce(f func(config any, reads fsm.Gate)) { announce = f }

// Announce makes the replica started with *fencelock.Config config
// announce to its peers that it reads reads, in place of its build's
// (fsm.Reads): one that announces fsm.Baseline stands for a build from
// before the version gate, which holds the gate of its groups there.
func Announce(config any, reads fsm.Gate) { announce(config, reads) }

// requestsKey is the context key of WithRequests.
type requestsKey struct{}

// WithRequests returns ctx carrying f, which the session machinery calls
// with the group, the session's part ID in it and the request number of
// every numbered request (Acquire, TryAcquire, Campaign, Release, Resign,
// Proclaim) made with the context, before it is proposed: what the group's
// applied log names the request by.
func WithRequests(ctx context.Context, f func(group string, part, seq uint64)) context.Context {
	return context.WithValue(ctx, requestsKey{}, f)
}

// Requested reports a request made with ctx to the function WithRequests
// put there, if any.
func Requested(ctx context.Context, group string, part, seq uint64) {
	if f, ok := ctx.Value(requestsKey{}).(func(string, uint64, uint64)); ok {
		f(group, part, seq)
	}
}

var mirrors func(node any) map[string]uint64

// RegisterMirrors installs MirrorsApplied; only package fencelock calls it.
func RegisterMirrors(f func(node any) map[string]uint64) { mirrors = f }

// MirrorsApplied reports, for a *fencelock.Node that runs only its own
// groups, the index each of its mirrors applied, by group name.
func MirrorsApplied(node any) map[string]uint64 { return mirrors(node) }
