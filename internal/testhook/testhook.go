// Package testhook lets fencelock's own tests, benchmark and quickstart
// simulate a frozen client without widening the public API: the root package
// registers the implementation at init.
package testhook

// freeze is set by package fencelock.
var freeze func(session any, frozen bool)

// Register installs the implementation; only package fencelock calls it.
func Register(f func(session any, frozen bool)) { freeze = f }

// Freeze simulates a process pause of a *fencelock.Session's holder (a long
// GC pause, a stopped VM): the session stops everything it does in the
// background, keep-alives and the close of a dead session, so the group
// hears nothing more from it. Calls the application makes still run.
func Freeze(session any) { freeze(session, true) }

// Thaw ends the pause started by Freeze.
func Thaw(session any) { freeze(session, false) }
