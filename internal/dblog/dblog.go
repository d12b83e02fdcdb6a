// Package dblog routes Dragonboat's logging into log/slog.
//
// Dragonboat's logger factory is process-wide and can be set only once, so
// the bridge is installed once and forwards to whichever *slog.Logger was
// set last. Dragonboat is chatty at info and warning level (connection
// attempts, elections, snapshots): those go to slog at debug level. Its
// errors go to warn, except its transport's, which every restart of a peer
// causes (counted in fencelock's Stats instead): those go to debug too. So an
// application logging at info sees no raft chatter, and sees what needs a
// human: Dragonboat's errors, fencelock's own warnings, and its panics.
package dblog

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/lni/dragonboat/v4/logger"
)

var (
	once   sync.Once
	target atomic.Pointer[slog.Logger]
)

// Use sends Dragonboat's log to l from now on.
func Use(l *slog.Logger) {
	target.Store(l)
	once.Do(func() {
		defer func() { _ = recover() }() // the application installed its own factory first: keep it
		logger.SetLoggerFactory(func(pkg string) logger.ILogger { return &bridge{pkg: pkg} })
	})
}

type bridge struct {
	pkg   string
	level atomic.Int32 // Dragonboat's level: messages above it are dropped
}

func (b *bridge) SetLevel(l logger.LogLevel) { b.level.Store(int32(l) + 1) }

func (b *bridge) log(l logger.LogLevel, to slog.Level, format string, args []any) {
	if set := b.level.Load(); set != 0 && int32(l) > set-1 {
		return
	}
	lg := target.Load()
	if lg == nil || !lg.Enabled(context.Background(), to) {
		return
	}
	lg.Log(context.Background(), to, fmt.Sprintf(format, args...), "component", "dragonboat/"+b.pkg)
}

func (b *bridge) Debugf(f string, a ...any)   { b.log(logger.DEBUG, slog.LevelDebug, f, a) }
func (b *bridge) Infof(f string, a ...any)    { b.log(logger.INFO, slog.LevelDebug, f, a) }
func (b *bridge) Warningf(f string, a ...any) { b.log(logger.WARNING, slog.LevelDebug, f, a) }

// Errorf logs at warn level, except for the transport's connection errors,
// which every restart of a peer causes: those are debug.
func (b *bridge) Errorf(f string, a ...any) {
	to := slog.LevelWarn
	if b.pkg == "transport" {
		to = slog.LevelDebug
	}
	b.log(logger.ERROR, to, f, a)
}

// Panicf logs and panics: Dragonboat relies on it to stop at a broken invariant.
func (b *bridge) Panicf(f string, a ...any) {
	msg := fmt.Sprintf(f, a...)
	if lg := target.Load(); lg != nil {
		lg.Error(msg, "component", "dragonboat/"+b.pkg)
	}
	panic(msg)
}
