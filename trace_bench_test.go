package fencelock

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkAcquireRelease is an uncontended Acquire and Release on a
// 1-replica in-process node: with the default provider (the global one, a
// no-op as no provider is set), an explicit no-op provider, and a
// recording SDK provider exporting to memory. Compare allocs/op: the no-op
// cases must add none (or close) over the code without spans.
func BenchmarkAcquireRelease(b *testing.B) {
	exp := tracetest.NewInMemoryExporter()
	recording := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer recording.Shutdown(context.Background())
	for _, bc := range []struct {
		name string
		tune func(*Config)
	}{
		{"default", nil},
		{"noop", func(c *Config) { c.TracerProvider = noop.NewTracerProvider() }},
		{"recording", func(c *Config) { c.TracerProvider = recording }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newCluster(b, 1, bc.tune)
			ctx := testCtx(b)
			s := newSession(b, ctx, c.node(1))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				l, err := s.Acquire(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
				if i%1000 == 999 {
					exp.Reset() // bounds the memory the recording case keeps
				}
			}
		})
	}
}
