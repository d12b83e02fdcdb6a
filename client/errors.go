package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/fencelock/fencelock/lockapi"
)

// The errors of answers that no lockapi sentinel stands for. Every other
// answer's error wraps lockapi's sentinel (see Error.Is), which package
// fencelock re-exports under the same name.
var (
	// ErrBadEndpoint: a Config.Endpoints entry is not an http:// or
	// https:// base URL.
	ErrBadEndpoint = errors.New("fencelock/client: not an http:// or https:// base URL")
	// ErrBadRequest: the replica refused the call as malformed (400
	// bad_request): a bug of this client or a version mismatch.
	ErrBadRequest = errors.New("fencelock/client: bad request")
	// ErrUnauthorized: the bearer token is missing or wrong (401).
	ErrUnauthorized = errors.New("fencelock/client: unauthorized")
	// ErrForbidden: the token lacks the right the call needs, or the
	// session's secret was refused (403).
	ErrForbidden = errors.New("fencelock/client: forbidden")
	// ErrNotFound: 404 for a call that names no session (an unknown path).
	ErrNotFound = errors.New("fencelock/client: not found")
	// ErrTooManyStreams: the replica has as many watch and observe streams
	// open as it allows (429 too_many_streams).
	ErrTooManyStreams = errors.New("fencelock/client: too many streams")
	// ErrServer: any other error answer (405, 408, 413, 500, a code this
	// client does not know).
	ErrServer = errors.New("fencelock/client: server error")
	// ErrBadAnswer: a 2xx answer (or a stream event) this client cannot
	// read.
	ErrBadAnswer = errors.New("fencelock/client: malformed answer")
)

// Error is an error answer of the API: its status, code and message, as
// the replica sent them. errors.Is matches it to the root sentinel of its
// code (see sentinels).
type Error struct {
	Status   int
	Code     string // "locked", "not_found", ...; "http" for a body that is not the API's
	Message  string // the server's text
	Owner    uint64 // session_elsewhere: the replica that owns the session
	Endpoint string // the base URL that answered
	session  bool   // the call named a session: not_found means it is over
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%d %s from %s)", e.Message, e.Status, e.Code, e.Endpoint)
}

// Is makes errors.Is(err, fencelock.ErrLocked) (and the others) true of the
// answers that mean it.
func (e *Error) Is(target error) bool {
	for _, s := range e.sentinels() {
		if s == target {
			return true
		}
	}
	return false
}

// sentinels are the root (or this package's) sentinels the answer stands
// for: every code of httpapi/errors.go has one.
func (e *Error) sentinels() []error {
	switch e.Code {
	case "not_found":
		if e.session {
			return []error{lockapi.ErrSessionExpired}
		}
		return []error{ErrNotFound}
	case "limit_exceeded":
		return append([]error{lockapi.ErrLimitExceeded}, limitSentinel(e.Message)...)
	}
	if s, ok := codeSentinels[e.Code]; ok {
		return s
	}
	switch e.Status {
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return []error{lockapi.ErrUnavailable}
	}
	return []error{ErrServer}
}

// codeSentinels are the sentinels of the codes that stand for the same
// ones in every answer (sentinels looks at the rest of the answer for
// not_found and limit_exceeded).
var codeSentinels = map[string][]error{
	"bad_request":       {ErrBadRequest},
	"invalid_name":      {lockapi.ErrInvalidName},
	"invalid_ttl":       {lockapi.ErrInvalidTTL},
	"value_too_large":   {lockapi.ErrValueTooLarge},
	"unknown_group":     {lockapi.ErrUnknownGroup},
	"unauthorized":      {ErrUnauthorized},
	"forbidden":         {ErrForbidden},
	"stale_token":       {lockapi.ErrNotHeld},
	"not_leader":        {lockapi.ErrNotLeader},
	"invalid_permits":   {lockapi.ErrInvalidPermits},
	"permit_conflict":   {lockapi.ErrPermitConflict},
	"max_hold_exceeded": {lockapi.ErrMaxHoldExceeded, lockapi.ErrNotHeld},
	"locked":            {lockapi.ErrLocked},
	"id_removed":        {lockapi.ErrIDRemoved},
	"membership":        {lockapi.ErrMembership},
	"too_many_streams":  {ErrTooManyStreams},
	// All three mean: ask another replica. Once every one was asked the
	// call could not reach the group: ErrUnavailable, as for an embedded
	// call.
	"session_elsewhere": {lockapi.ErrUnavailable},
	"unavailable":       {lockapi.ErrUnavailable},
	"replica_removed":   {lockapi.ErrUnavailable},
	"no_quorum":         {lockapi.ErrNoQuorum, lockapi.ErrUnavailable},
}

// limitSentinel finds which limit a limit_exceeded answer names, from the
// library's error text the server passes on.
func limitSentinel(msg string) []error {
	for _, s := range []error{lockapi.ErrTooManySessions, lockapi.ErrTooManyLocks, lockapi.ErrTooManyWaiters,
		lockapi.ErrTooManyPending} {
		if strings.Contains(msg, s.Error()) {
			return []error{s}
		}
	}
	return nil
}

// decodeError reads an error answer. A body that is not the API's error
// object (a proxy's page, Go's 431 text) keeps its text, cut short, with
// code "http".
func decodeError(status int, b []byte, session bool, endpoint string) *Error {
	e := &Error{Status: status, Endpoint: endpoint, session: session}
	var body lockapi.ErrorBody
	if json.Unmarshal(b, &body) == nil && body.Code != "" {
		e.Code, e.Message, e.Owner = clean(body.Code, 64), clean(body.Message, 4096), body.Owner
		return e
	}
	e.Code, e.Message = "http", clean(strings.TrimSpace(string(b)), 512)
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// clean keeps at most n bytes of s, as valid UTF-8, so that a garbage
// answer makes a readable error.
func clean(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
