// Package testhook lets fencelock's own tests, benchmark and quickstart
// simulate a frozen client or a jumping clock without widening the public
// API: the root package registers the implementation at init.
package testhook

import "github.com/fencelock/fencelock/internal/clock"

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
