// Package logtap keeps what a logger is given, for tests: a test waits for
// the line a mistake must produce (Tap.Wait), or reads every record once
// the replicas stopped (Tap.Records). Give a replica Tap.Logger as its
// Config.Logger.
//
// It imports nothing of fencelock's, so that every test can use it:
// fencelock's own tests of unexported names (package fencelock) cannot
// import fencelocktest, which imports fencelock.
//
// Dragonboat's own logs reach the logger of the last replica started in
// the process, so the replicas of one test that is to hear them share one
// Tap.
package logtap

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Tap keeps every record at its level or above that its loggers are given.
// It is safe for concurrent use.
type Tap struct {
	min     slog.Level
	mu      sync.Mutex
	recs    []Record
	changed chan struct{} // closed and replaced on every new record
}

// Record is one record a Tap kept.
type Record struct {
	Level   slog.Level
	Message string
	// Attrs are the logger's attributes and the record's, by key, as
	// their values' String; the record's win over the logger's.
	Attrs map[string]string
	// Line is the record as Wait matches it: the level, the message, then
	// the logger's attributes and the record's as key=value, each after a
	// space.
	Line string
}

// New returns a Tap that keeps the records at min or above:
// slog.LevelDebug keeps every level slog names, slog.LevelInfo what an
// application logs by default.
func New(min slog.Level) *Tap {
	return &Tap{min: min, changed: make(chan struct{})}
}

// Logger returns a logger whose records t keeps.
func (t *Tap) Logger() *slog.Logger { return slog.New(handler{tap: t}) }

// Records returns a copy of the records kept so far, in the order they
// were logged.
func (t *Tap) Records() []Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Record(nil), t.recs...)
}

// Wait returns the Line of the first record kept, before the call or
// during it, whose Line contains every one of parts. It fails tb, saying
// which parts it waited for, when ctx ends first.
func (t *Tap) Wait(tb testing.TB, ctx context.Context, parts ...string) string {
	tb.Helper()
	seen := 0
	for {
		t.mu.Lock()
		recs, changed := t.recs[seen:], t.changed
		seen = len(t.recs)
		t.mu.Unlock()
		for _, r := range recs {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(r.Line, p)
			}
			if ok {
				return r.Line
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			tb.Fatalf("no log line with %q: %v", parts, ctx.Err())
		}
	}
}

// handler is the slog.Handler of t's loggers, with the attributes given to
// its logger (slog.Logger.With). Groups are not kept apart: an attribute
// is known by its own key.
type handler struct {
	tap   *Tap
	attrs []slog.Attr
}

func (h handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.tap.min }

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	return handler{h.tap, append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h handler) WithGroup(string) slog.Handler { return h }

func (h handler) Handle(_ context.Context, r slog.Record) error {
	rec := Record{Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
	var line strings.Builder
	line.WriteString(r.Level.String() + " " + r.Message)
	add := func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		line.WriteString(" " + a.String())
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	rec.Line = line.String()
	h.tap.mu.Lock()
	defer h.tap.mu.Unlock()
	h.tap.recs = append(h.tap.recs, rec)
	close(h.tap.changed) // wakes every Wait
	h.tap.changed = make(chan struct{})
	return nil
}
