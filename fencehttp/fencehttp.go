// Package fencehttp carries fencing tokens over HTTP. A client stamps each
// request with its fence in the Fencing-Token header (Transport), re-checking
// its grant just before sending; the server admits the fence against a
// resource's fence before the handler runs (Middleware), so a deposed lock
// holder's requests are refused with 409 Conflict once its successor's token
// has reached the fence: by a request of the successor's, the first of which
// may be a claim made as soon as it is granted. A holder of another group
// than the one the resource is keyed to is refused with 409 Conflict too.
//
// What an admitted request's handler does is fenced only when the handler
// runs inside the fence. With an in-process *fencelock.Fencer, Middleware
// runs the handler inside Fencer.DoFence, so a request with a lower token
// can never have its effect land after a higher token was admitted. With
// any other fence (fencesql, a remote service) the admission is a claim,
// and a claim is not a barrier: a request admitted before a higher token
// can still be running its handler, and land its effect, after the higher
// token's request. Such a handler must fence its own effect, with the fence
// Fence returns, in the resource's own write path (fencesql.Fencer.DoFence
// in the transaction that writes, say).
//
// The header value is the fence's String form (fencelock.Fence.String,
// parsed with fencelock.ParseFence): the group's ID in 16 hex digits, a
// colon, and the token in decimal, e.g.
//
//	Fencing-Token: 000000000000feed:262144
//
// A bare decimal token ("262144") is accepted too, as group 0, a fence
// without a group: a resource keyed to no group checks it by its token
// alone, and one keyed to a group refuses it as of another group (409,
// "code":"other_group"; see fencelock.Fencer's Groups). The token is an unsigned 64-bit integer above 0, with
// no sign, spaces or leading '+' ("42", not "+42" or " 42").
package fencehttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fencelock/fencelock"
)

// Header is the request header that carries the fence.
const Header = "Fencing-Token"

// ErrBadToken: the Fencing-Token header is missing, repeated, or not a
// fence's String form nor a bare decimal token. A malformed value's error
// also satisfies errors.Is(err, fencelock.ErrInvalidFence).
var ErrBadToken = errors.New("fencehttp: missing or malformed Fencing-Token header")

// The "code" of Middleware's JSON error bodies, for clients to tell its
// refusals apart without parsing "error".
const (
	codeBadFence   = "bad_fence"
	codeOtherGroup = "other_group"
	codeFailed     = "fence_failed"
)

// parseHeader returns the fence of a request's headers: exactly one
// Fencing-Token value, in ParseFence's syntax.
func parseHeader(h http.Header) (fencelock.Fence, error) {
	vals := h.Values(Header)
	if len(vals) != 1 {
		return fencelock.Fence{}, fmt.Errorf("%w: %d values, want one", ErrBadToken, len(vals))
	}
	f, err := fencelock.ParseFence(vals[0])
	if err != nil {
		return fencelock.Fence{}, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	return f, nil
}

// Middleware admits each request's fence for resource(r) against f before
// calling next, so an admitted request raises the resource's mark, and a
// request that carries nothing but a fence is a claim at grant time (see
// fencelock.Claimer). *fencelock.Fencer and *fencesql.Fencer key the
// resource to the first nonzero group admitted and refuse other groups'
// fences (and group 0 once keyed). A fence that is only a Claimer checks
// tokens alone.
//
// If f is an in-process *fencelock.Fencer (any fence with its method
// DoFence(resource string, fence fencelock.Fence, write func() error)
// error), next runs inside f.DoFence: the fence is admitted and the handler
// runs under the resource's check, so requests of one resource are served
// one at a time, and a request with a lower token never has its effect land
// after a higher token was admitted (a lower token that arrives while a
// higher one's handler runs waits, then is refused). next must then not
// call f for the same resource (DoFence's check is not reentrant), and a
// slow next holds up the resource's other requests.
//
// Otherwise Middleware claims the fence (ClaimFence with the request's
// context, if f is a fencelock.FenceClaimer, such as *fencesql.Fencer;
// Claim with the bare token otherwise) and then calls next, outside the
// fence. A claim is not a barrier: it refuses requests with a lower token
// from when it returns, but a request admitted before it may still be
// running next, whose effect can then land after the higher token's. A
// resource that needs "no lower token's effect after a higher one" fences
// inside its own write path too, with the fence Fence returns
// (fencesql.Fencer.DoFence in the same transaction as the write, say).
//
// A request without exactly one well-formed Fencing-Token header gets 400
// Bad Request with the JSON body
//
//	{"error":"fencehttp: missing or malformed Fencing-Token header: ...","code":"bad_fence"}
//
// a stale token gets 409 Conflict with the JSON body
//
//	{"error":"stale fencing token","code":"stale_token","resource":"...","token":"7","highest":"9"}
//
// (tokens as decimal strings; highest is present when f's error is a
// *fencelock.StaleTokenError); a fence of another group than the
// resource's gets 409 Conflict with the JSON body
//
//	{"error":"fencing token of another group","code":"other_group","resource":"...",
//	 "token":"7","group":"000000000000beef","resource_group":"000000000000feed"}
//
// (groups in 16 hex digits; resource_group is present when f's error is a
// *fencelock.OtherGroupError); any other error from f gets 500 with
// "code":"fence_failed". In all those cases next does not run.
func Middleware(f fencelock.Claimer, resource func(*http.Request) string, next http.Handler) http.Handler {
	fc, withGroup := f.(fencelock.FenceClaimer)
	barrier, inFence := f.(doFencer)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fence, err := parseHeader(r.Header)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "code": codeBadFence})
			return
		}
		res := resource(r)
		if inFence {
			// As Fencer.ClaimFence checks them: a request already gone (or a
			// grant in its context that is over) claims nothing.
			err := fencelock.GrantErr(r.Context())
			if err == nil {
				err = r.Context().Err()
			}
			if err == nil {
				ran := false
				err = barrier.DoFence(res, fence, func() error {
					ran = true
					next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), fenceKey{}, fence)))
					return nil
				})
				if ran {
					return // served; the fence's own errors come before next runs
				}
			}
			writeRefusal(w, err, res, fence)
			return
		}
		if withGroup {
			err = fc.ClaimFence(r.Context(), res, fence)
		} else {
			err = f.Claim(r.Context(), res, fence.Token)
		}
		if err != nil {
			writeRefusal(w, err, res, fence)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), fenceKey{}, fence)))
	})
}

// doFencer is a fence that runs a write under its check, as
// *fencelock.Fencer does.
type doFencer interface {
	DoFence(resource string, fence fencelock.Fence, write func() error) error
}

// writeRefusal answers a fence's refusal, with a code a client can switch
// on.
func writeRefusal(w http.ResponseWriter, err error, res string, fence fencelock.Fence) {
	token := strconv.FormatUint(fence.Token, 10)
	switch {
	case errors.Is(err, fencelock.ErrOtherGroup):
		// Checked first: another group's token is not comparable with the
		// mark, so a fence that reported both would mean this.
		body := map[string]string{
			"error":    "fencing token of another group",
			"code":     codeOtherGroup,
			"resource": res,
			"token":    token,
			"group":    fmt.Sprintf("%016x", fence.Group),
		}
		var oe *fencelock.OtherGroupError
		if errors.As(err, &oe) {
			body["resource_group"] = fmt.Sprintf("%016x", oe.Group)
		}
		writeJSON(w, http.StatusConflict, body)
	case errors.Is(err, fencelock.ErrStaleToken):
		body := map[string]string{
			"error":    "stale fencing token",
			"code":     "stale_token",
			"resource": res,
			"token":    token,
		}
		var se *fencelock.StaleTokenError
		if errors.As(err, &se) {
			body["highest"] = strconv.FormatUint(se.Highest, 10)
		}
		writeJSON(w, http.StatusConflict, body)
	default:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "fencing check failed", "code": codeFailed})
	}
}

type fenceKey struct{}

// Fence returns the fence Middleware admitted for r; ok is false for a
// request that did not pass through Middleware. Its Group is 0 if the
// request sent a bare token.
func Fence(r *http.Request) (fence fencelock.Fence, ok bool) {
	fence, ok = r.Context().Value(fenceKey{}).(fencelock.Fence)
	return fence, ok
}

// Token returns the token of the fence Middleware admitted for r; ok is
// false for a request that did not pass through Middleware.
func Token(r *http.Request) (token uint64, ok bool) {
	f, ok := Fence(r)
	return f.Token, ok
}

func writeJSON(w http.ResponseWriter, code int, body map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// Transport is a client http.RoundTripper that stamps requests with their
// fence, in its String form. For each request, Fence gives the fence; if it
// reports false the request is sent unchanged.
//
// A nil Fence takes the fence of the grant the request's context carries
// (fencelock.FenceFrom: fencelock.Lock.Context, Leadership.Context), and
// re-checks the holder's deadline by its clock immediately before handing
// the request to Base (fencelock.GrantErr): a request whose grant is over is
// not sent, and fails with an error wrapping the grant's reason
// (fencelock.ErrSessionExpired, ErrNotHeld, ErrNotLeader, ...). That catches
// a process that woke from a pause with a request ready before its deadline
// timer had run. A request with no grant in its context is sent without the
// header. The server's fence still refuses a holder that pauses after the
// check, once the successor's token has reached it. The group is 0 (sent as
// 16 zeros) while the holder's replica has not learnt its group's ID: a
// resource keyed to no group checks it by its token alone, one keyed to a
// group refuses it as of another group.
//
// The request is cloned before the header is set, as RoundTrippers must not
// modify their input.
type Transport struct {
	Base  http.RoundTripper // nil means http.DefaultTransport
	Fence func(*http.Request) (fencelock.Fence, bool)
}

func grantFence(r *http.Request) (fencelock.Fence, bool, error) {
	f, ok := fencelock.FenceFrom(r.Context())
	if !ok && f.Token != 0 { // a grant that is over; GrantErr says why, for good
		return fencelock.Fence{}, false, fmt.Errorf("fencehttp: grant with token %d is over, request not sent: %w",
			f.Token, fencelock.GrantErr(r.Context()))
	}
	return f, ok, nil
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	var fence fencelock.Fence
	var ok bool
	if t.Fence == nil {
		var err error
		if fence, ok, err = grantFence(r); err != nil {
			if r.Body != nil {
				r.Body.Close() // a RoundTripper closes the body, on errors too
			}
			return nil, err
		}
	} else {
		fence, ok = t.Fence(r)
	}
	if ok {
		r = r.Clone(r.Context())
		r.Header.Set(Header, fence.String())
	}
	return base.RoundTrip(r)
}
