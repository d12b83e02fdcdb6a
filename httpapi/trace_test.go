package httpapi_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
	"github.com/fencelock/fencelock/transport"
)

// A client's W3C traceparent header continues its trace into the replica:
// the span of the acquire the request makes is a child of the client's
// span, for a Try answered in the request and for a wait that outlives
// it; a request without the header starts a trace of its own.
func TestTraceparentIsTheAcquiresParent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exp := tracetest.NewInMemoryExporter()
	ended := make(chan string, 100)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(endSignal(ended)))
	defer tp.Shutdown(context.Background())
	net := transport.NewNetwork(1)
	n, err := fencelock.Start(ctx, fencelock.Config{ReplicaID: 1, Members: map[uint64]string{1: net.Addr(1)},
		Dir: t.TempDir(), Transport: net, Logger: quiet, TracerProvider: tp})
	require.NoError(t, err)
	defer n.Close()
	api := httpapi.New(n, httpapi.WithLogger(quiet))
	defer api.Close()
	srv := httptest.NewServer(api)
	defer srv.Close()

	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		client  = "00f067aa0ba902b7" // the client's span
		waiting = "b7ad6b7169203331" // the client's span of the waiting call
	)
	traceparent := func(span string) map[string]string {
		return map[string]string{"traceparent": "00-" + traceID + "-" + span + "-01"}
	}
	withSecret := func(hdr map[string]string, id string) map[string]string {
		hdr[httpapi.SecretHeader] = secrets.For("/v1/sessions/"+id, nil)
		return hdr
	}
	holder, waiter := newSession(t, srv.URL, 10000), newSession(t, srv.URL, 10000)
	r := callWith(t, "POST", lockURL(srv.URL, "jobs/reindex", "acquire"),
		map[string]any{"session_id": holder}, withSecret(traceparent(client), holder))
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, true, r.Body["granted"])
	token := r.Body["fencing_token"]
	r = callWith(t, "POST", lockURL(srv.URL, "jobs/reindex", "acquire"),
		map[string]any{"session_id": waiter, "wait": true}, withSecret(traceparent(waiting), waiter))
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	r = call(t, "POST", lockURL(srv.URL, "jobs/reindex", "release"), map[string]any{"session_id": holder, "fencing_token": token})
	require.Equal(t, 200, r.Status, r.Raw)

	// The waiting call ends with its grant, after the request returned.
	for done := false; !done; {
		select {
		case name := <-ended:
			done = name == "fencelock.Acquire"
		case <-ctx.Done():
			t.Fatal("the waiting acquire's span never ended")
		}
	}
	var acquires []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "fencelock.Acquire" || s.Name == "fencelock.TryAcquire" {
			acquires = append(acquires, s)
		}
	}
	require.Len(t, acquires, 2)
	try, wait := acquires[0], acquires[1]
	require.Equal(t, "fencelock.TryAcquire", try.Name)
	require.Equal(t, traceID, try.SpanContext.TraceID().String())
	require.Equal(t, client, try.Parent.SpanID().String())
	require.True(t, try.Parent.IsRemote())
	require.Equal(t, "fencelock.Acquire", wait.Name)
	require.Equal(t, traceID, wait.SpanContext.TraceID().String())
	require.Equal(t, waiting, wait.Parent.SpanID().String())
	for _, s := range exp.GetSpans() {
		if s.Name == "fencelock.Release" {
			require.NotEqual(t, traceID, s.SpanContext.TraceID().String(), "a request without traceparent starts its own trace")
			require.False(t, s.Parent.IsValid())
		}
	}
}

// endSignal is a span processor that sends the name of each span that
// ends, if its buffer has room (it must never block the traced code).
type endSignal chan<- string

func (e endSignal) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e endSignal) OnEnd(s sdktrace.ReadOnlySpan)                   { e <- s.Name() }
func (e endSignal) Shutdown(context.Context) error                  { return nil }
func (e endSignal) ForceFlush(context.Context) error                { return nil }
