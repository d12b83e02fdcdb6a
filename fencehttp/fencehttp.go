// Package fencehttp carries fencing tokens over HTTP. A client stamps each
// request with its token in the Fencing-Token header (Transport), re-checking
// its grant just before sending; the server admits the token against a
// fence before the handler runs (Middleware), so a deposed lock holder's
// requests are refused with 409 Conflict once its successor's token has
// reached the fence: by a request of the successor's, the first of which
// may be a claim made as soon as it is granted.
//
// The header value is the token in decimal, an unsigned 64-bit integer with
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

// Header is the request header that carries the fencing token.
const Header = "Fencing-Token"

// ErrBadToken: the Fencing-Token header is missing or not a decimal uint64.
var ErrBadToken = errors.New("fencehttp: missing or malformed Fencing-Token header")

// ParseToken parses a Fencing-Token header value: decimal digits only, at
// most 20, fitting in a uint64. Anything else is ErrBadToken.
func ParseToken(s string) (uint64, error) {
	if s == "" || len(s) > 20 {
		return 0, ErrBadToken
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, ErrBadToken
		}
	}
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, ErrBadToken
	}
	return t, nil
}

// Middleware admits each request's fencing token for resource(r) against f
// before calling next: it claims the token (f.Claim with the request's
// context), so an admitted request raises the resource's mark, and a request
// that carries nothing but a token is a claim at grant time (see
// fencelock.Claimer). *fencelock.Fencer and *fencesql.Fencer are fences.
//
// A request without exactly one well-formed Fencing-Token header gets 400
// Bad Request; a stale token gets 409 Conflict with the JSON body
//
//	{"error":"stale fencing token","resource":"...","token":"7","highest":"9"}
//
// (tokens as decimal strings; highest is present when f's error is a
// *fencelock.StaleTokenError); any other error from f gets 500. In all those
// cases next does not run. Admission and the handler's write are not atomic:
// a request admitted here may still race a later, higher token inside next,
// so a resource that needs that guarantee fences inside its own write path
// too, with the token Token returns (fencesql.Fencer.Do in the same
// transaction as the write, say).
func Middleware(f fencelock.Claimer, resource func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vals := r.Header.Values(Header)
		if len(vals) != 1 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": ErrBadToken.Error()})
			return
		}
		token, err := ParseToken(vals[0])
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": ErrBadToken.Error()})
			return
		}
		res := resource(r)
		if err := f.Claim(r.Context(), res, token); err != nil {
			if errors.Is(err, fencelock.ErrStaleToken) {
				body := map[string]string{
					"error":    "stale fencing token",
					"resource": res,
					"token":    strconv.FormatUint(token, 10),
				}
				var se *fencelock.StaleTokenError
				if errors.As(err, &se) {
					body["highest"] = strconv.FormatUint(se.Highest, 10)
				}
				writeJSON(w, http.StatusConflict, body)
				return
			}
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "fencing check failed"})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, token)))
	})
}

type tokenKey struct{}

// Token returns the fencing token Middleware admitted for r; ok is false for
// a request that did not pass through Middleware.
func Token(r *http.Request) (token uint64, ok bool) {
	token, ok = r.Context().Value(tokenKey{}).(uint64)
	return token, ok
}

func writeJSON(w http.ResponseWriter, code int, body map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// Transport is a client http.RoundTripper that stamps requests with their
// fencing token. For each request, Token gives the token; if it reports
// false the request is sent unchanged.
//
// A nil Token takes the token of the grant the request's context carries
// (fencelock.Lock.Context, Leadership.Context), and re-checks the holder's
// deadline by its clock immediately before handing the request to Base
// (fencelock.GrantErr): a request whose grant is over is not sent, and fails
// with an error wrapping the grant's reason (fencelock.ErrSessionExpired,
// ErrNotHeld, ErrNotLeader, ...). That catches a process that woke from a
// pause with a request ready before its deadline timer had run. A request
// with no grant in its context is sent without the header. The server's
// fence still refuses a holder that pauses after the check, once the
// successor's token has reached it.
//
// The request is cloned before the header is set, as RoundTrippers must not
// modify their input.
type Transport struct {
	Base  http.RoundTripper // nil means http.DefaultTransport
	Token func(*http.Request) (uint64, bool)
}

func grantToken(r *http.Request) (uint64, bool, error) {
	tok, ok := fencelock.TokenFrom(r.Context())
	if !ok && tok != 0 { // a grant that is over; GrantErr says why, for good
		return 0, false, fmt.Errorf("fencehttp: grant with token %d is over, request not sent: %w",
			tok, fencelock.GrantErr(r.Context()))
	}
	return tok, ok, nil
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	var tok uint64
	var ok bool
	if t.Token == nil {
		var err error
		if tok, ok, err = grantToken(r); err != nil {
			if r.Body != nil {
				r.Body.Close() // a RoundTripper closes the body, on errors too
			}
			return nil, err
		}
	} else {
		tok, ok = t.Token(r)
	}
	if ok {
		r = r.Clone(r.Context())
		r.Header.Set(Header, strconv.FormatUint(tok, 10))
	}
	return base.RoundTrip(r)
}
