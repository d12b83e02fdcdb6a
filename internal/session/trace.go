package session

import (
	"context"
	"errors"
	"reflect"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Tracing: one span per Acquire, TryAcquire (every mode), Campaign,
// TryCampaign, Release and Resign, a child of the span in the caller's
// context, with a child span for each raft proposal it makes. Attributes
// are computed only for a recording span, so that with the default no-op
// provider a call pays for one Start and one End and nothing else.

// The span attributes (the keys are the contract of dashboards and queries
// built on them; docs/operations.md lists them).
const (
	attrName     = attribute.Key("fencelock.name")           // lock or election, as the group stores it
	attrGroup    = attribute.Key("fencelock.group")          // "" for the default group
	attrMode     = attribute.Key("fencelock.mode")           // exclusive, shared, semaphore, election
	attrPermits  = attribute.Key("fencelock.permits")        // a semaphore's permit count
	attrWait     = attribute.Key("fencelock.wait")           // true: the call queues (Acquire, Campaign); false: a Try
	attrSession  = attribute.Key("fencelock.session")        // the session's ID in the group
	attrResult   = attribute.Key("fencelock.result")         // see the result* constants
	attrToken    = attribute.Key("fencelock.token")          // the fencing token granted or given back
	attrPosition = attribute.Key("fencelock.queue_position") // place in the queue at entry: 0 granted at once, 1 first waiter
	attrWaited   = attribute.Key("fencelock.wait_ns")        // from the call to its end (the grant), nanoseconds
	attrAhead    = attribute.Key("fencelock.waiters_ahead")  // on the "granted" event: waiters queued ahead at entry
	attrHeld     = attribute.Key("fencelock.held_ns")        // Release, Resign: how long the grant was held
	attrKind     = attribute.Key("fencelock.command")        // a proposal's command kind
)

// The values of fencelock.result.
const (
	resultGranted  = "granted"  // the lock or leadership was granted
	resultLocked   = "locked"   // a Try found it taken (ErrLocked, ErrElectionTaken)
	resultOK       = "ok"       // Release, Resign done
	resultNotHeld  = "not_held" // Release, Resign of a grant no longer current
	resultTimeout  = "timeout"  // the caller's deadline passed
	resultCanceled = "canceled" // the caller's context was cancelled
	resultError    = "error"    // anything else (the span's status says what)
)

// spanName is the public call that cmd stands for.
func spanName(cmd *fsm.Command) string {
	switch cmd.Kind {
	case fsm.KindAcquire:
		if cmd.Wait {
			return "fencelock.Acquire"
		}
		return "fencelock.TryAcquire"
	case fsm.KindAcquireShared:
		switch {
		case cmd.Permits > 0 && cmd.Wait:
			return "fencelock.AcquireSemaphore"
		case cmd.Permits > 0:
			return "fencelock.TryAcquireSemaphore"
		case cmd.Wait:
			return "fencelock.AcquireShared"
		}
		return "fencelock.TryAcquireShared"
	case fsm.KindCampaign:
		if cmd.Wait {
			return "fencelock.Campaign"
		}
		return "fencelock.TryCampaign"
	case fsm.KindRelease:
		return "fencelock.Release"
	case fsm.KindResign:
		return "fencelock.Resign"
	}
	return "fencelock." + cmd.Kind.String()
}

func (m grantMode) String() string {
	switch {
	case m.election:
		return "election"
	case m.permits > 0:
		return "semaphore"
	case m.shared:
		return "shared"
	}
	return "exclusive"
}

func cmdMode(cmd *fsm.Command) grantMode {
	return grantMode{election: cmd.Kind == fsm.KindCampaign, shared: cmd.Kind == fsm.KindAcquireShared,
		permits: int(cmd.Permits)}
}

// result is the fencelock.result of a call that ended with err.
func result(err error) string {
	switch {
	case err == nil:
		return resultGranted
	case errors.Is(err, ErrLocked), errors.Is(err, ErrElectionTaken):
		return resultLocked
	case errors.Is(err, ErrNotHeld), errors.Is(err, ErrNotLeader):
		return resultNotHeld
	case errors.Is(err, context.DeadlineExceeded):
		return resultTimeout
	case errors.Is(err, context.Canceled):
		return resultCanceled
	}
	return resultError
}

// endRequest sets the attributes of an Acquire's or Campaign's span once
// the call is over; the caller checked that span records.
func endRequest(span trace.Span, group string, cmd *fsm.Command, g *Grant, err error, waited time.Duration) {
	mode := cmdMode(cmd)
	span.SetAttributes(attrName.String(cmd.Name), attrGroup.String(group), attrMode.String(mode.String()),
		attrWait.Bool(cmd.Wait), attrWaited.Int64(int64(waited)), attrResult.String(result(err)))
	if mode.permits > 0 {
		span.SetAttributes(attrPermits.Int(mode.permits))
	}
	if cmd.Session != 0 {
		span.SetAttributes(attrSession.Int64(int64(cmd.Session)))
	}
	if g != nil {
		span.SetAttributes(attrToken.Int64(int64(g.token)))
	}
	endErr(span, err)
}

// endErr marks the span failed for an error that is not an answer the
// caller asked for (a Try finding the lock taken, its own deadline).
func endErr(span trace.Span, err error) {
	switch result(err) {
	case resultError:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case resultTimeout, resultCanceled, resultNotHeld, resultLocked:
		span.SetStatus(codes.Unset, "")
	}
}

// propose proposes cmd on r, in a child span of ctx's span when that
// records.
func (p *Part) propose(ctx context.Context, r Group, cmd fsm.Command) (fsm.Result, error) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return r.Propose(ctx, cmd)
	}
	ctx, span := p.rt.h.tracer.Start(ctx, "fencelock.propose",
		trace.WithAttributes(attrKind.String(cmd.Kind.String()), attrGroup.String(p.rt.group)))
	defer span.End()
	res, err := r.Propose(ctx, cmd)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attribute.String("fencelock.status", res.Status.String()))
	}
	return res, err
}

// queuedAt records on ctx's span, if it records, the request's place in
// its queue as this replica applied it: the entry that queued it was
// applied here before its proposal returned (0: granted meanwhile). ok is
// false, and nothing is read, when the span does not record.
func (p *Part) queuedAt(ctx context.Context, r Group, seq uint64) (pos int, ok bool) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return 0, false
	}
	v, err := r.StaleRead(func(st *fsm.State) any { return st.Position(p.id, seq) })
	if err != nil {
		return 0, true
	}
	pos = v.(int)
	span.SetAttributes(attrPosition.Int(pos))
	return pos, true
}

// startSpan starts the span of the public call cmd stands for, a child of
// ctx's span. While the tracer cannot record (Config.Tracing) and ctx
// carries no recording span, it makes none: it returns ctx as it is, whose
// span does not record either, so that what reads the span from the call's
// context (the proposal's child span, the queue position, the "granted"
// event) skips it as it skipped a no-op span; and a no-op span to end, not
// the caller's.
func (h *Host) startSpan(ctx context.Context, cmd *fsm.Command) (context.Context, trace.Span) {
	if !h.tracing() && !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return h.tracer.Start(ctx, spanName(cmd))
}

// Tracing returns Config.Tracing for tp's tracer: false at once for the
// no-op provider; for OpenTelemetry's global provider (otel's internal
// delegating one, what otel.GetTracerProvider returns before an application
// sets its own), false until the application sets one, which the global
// provider's tracers then delegate to; true for any other. A span of a
// provider that cannot record costs a context value and a span value for
// nothing on every call (issue 49). The one thing a global provider with no
// application provider behind it could record with is OpenTelemetry's eBPF
// auto-instrumentation, which fencelock's spans therefore do not feed.
func Tracing(tp trace.TracerProvider) func() bool {
	switch tp.(type) {
	case noop.TracerProvider, *noop.TracerProvider:
		return func() bool { return false }
	}
	if t := reflect.TypeOf(tp); t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == globalPkg {
		// Once an application provider is set, otel.GetTracerProvider
		// returns it rather than tp.
		return func() bool { return otel.GetTracerProvider() != tp }
	}
	return func() bool { return true }
}

// noSpan is the span of a call that makes none.
var noSpan trace.Span = noop.Span{}

// globalPkg is the package of OpenTelemetry's global delegating provider.
const globalPkg = "go.opentelemetry.io/otel/internal/global"
