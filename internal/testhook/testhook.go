// Package testhook lets fencelock's own tests, benchmark and quickstart
// simulate a frozen client or a jumping clock, and read a few internal
// figures, without widening the public API: the root package registers the
// implementations at init.
package testhook

import (
	"time"

	"github.com/fencelock/fencelock/internal/clock"
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

var crash func(node any)

// RegisterCrash installs Crash; only package fencelock calls it.
func RegisterCrash(f func(node any)) { crash = f }

// Crash stops a *fencelock.Node as the crash of its process would: like
// Close, but without handing the leadership of its groups over first, so
// its peers wait an election timeout for a new leader (W4's hard stop).
func Crash(node any) { crash(node) }
