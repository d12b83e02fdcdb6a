package fencelock

import (
	"context"
	"log/slog"

	"sync"
)

// recorder is a slog.Handler that keeps every record at Info or above, with
// the attributes of its logger.
type recorder struct {
	mu      *sync.Mutex
	records *[]logged
	attrs   []slog.Attr
}

type logged struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func newRecorder() recorder { return recorder{mu: new(sync.Mutex), records: new([]logged)} }

func (r recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (r recorder) Handle(_ context.Context, rec slog.Record) error {
	l := logged{level: rec.Level, msg: rec.Message, attrs: map[string]string{}}
	for _, a := range r.attrs {
		l.attrs[a.Key] = a.Value.String()
	}
	rec.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	*r.records = append(*r.records, l)
	r.mu.Unlock()
	return nil
}

func (r recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return recorder{mu: r.mu, records: r.records, attrs: append(append([]slog.Attr(nil), r.attrs...), as...)}
}

func (r recorder) WithGroup(string) slog.Handler { return r }

func (r recorder) all() []logged {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]logged(nil), *r.records...)
}
