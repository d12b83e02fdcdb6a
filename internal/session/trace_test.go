package session

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencelock/fencelock/internal/fsm"
)

// TestNoopSpanCostsNothing: with a provider that cannot record (the no-op
// one, the global one while no application provider is behind it, or none)
// a call starts no span: no allocation and ctx handed on as it is; a
// recording provider, or a recording span in the caller's context, still
// gets its span (issue 49: two allocations a call on every path).
func TestNoopSpanCostsNothing(t *testing.T) {
	cmd := &fsm.Command{Kind: fsm.KindAcquire, Wait: true}
	for _, tc := range []struct {
		name string
		h    *Host
	}{
		{"none", NewHost(Config{})},
		{"noop", NewHost(Config{Tracer: noop.NewTracerProvider().Tracer("t"),
			Tracing: Tracing(noop.NewTracerProvider())})},
		{"global", NewHost(Config{Tracer: otel.GetTracerProvider().Tracer("t"),
			Tracing: Tracing(otel.GetTracerProvider())})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.h.Close(nil)
			ctx := context.Background()
			allocs := testing.AllocsPerRun(100, func() {
				_, span := tc.h.startSpan(ctx, cmd)
				span.End()
			})
			if allocs != 0 {
				t.Errorf("a span of a provider that cannot record took %v allocations, want 0", allocs)
			}
			sctx, span := tc.h.startSpan(ctx, cmd)
			if span.IsRecording() || sctx != ctx {
				t.Errorf("a provider that cannot record made a span (recording %v) into the call's context", span.IsRecording())
			}
			span.End()
		})
	}

	exp := tracetest.NewInMemoryExporter()
	rec := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer rec.Shutdown(context.Background())
	// A recording span in the caller's context: the call's span is its
	// child, as before, even with a node provider that does not record.
	h := NewHost(Config{Tracer: noop.NewTracerProvider().Tracer("t"), Tracing: Tracing(noop.NewTracerProvider())})
	defer h.Close(nil)
	pctx, parent := rec.Tracer("app").Start(context.Background(), "app")
	sctx, span := h.startSpan(pctx, cmd)
	span.End()
	parent.End()
	if sctx == pctx {
		t.Fatal("a caller's recording span was handed on as the call's")
	}
	// A recording provider records.
	h2 := NewHost(Config{Tracer: rec.Tracer("t"), Tracing: Tracing(rec)})
	defer h2.Close(nil)
	_, span = h2.startSpan(context.Background(), cmd)
	if !span.IsRecording() {
		t.Fatal("the span of a recording provider does not record")
	}
	span.End()
	// The global provider, once the application sets one behind it
	// (after the node started, as Config.TracerProvider allows), records.
	global := otel.GetTracerProvider()
	h3 := NewHost(Config{Tracer: global.Tracer("t"), Tracing: Tracing(global)})
	defer h3.Close(nil)
	otel.SetTracerProvider(rec)
	_, span = h3.startSpan(context.Background(), cmd)
	if !span.IsRecording() {
		t.Fatal("the global provider's span does not record once a provider is set behind it")
	}
	span.End()
}
