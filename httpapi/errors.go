package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/lockapi"
)

// The error codes of the API, in the "code" field of every error body.
const (
	CodeBadRequest       = "bad_request"        // 400: malformed JSON, unknown field, missing field
	CodeInvalidName      = "invalid_name"       // 400: a lock or election name the group refuses
	CodeInvalidTTL       = "invalid_ttl"        // 400: ttl_ms out of range
	CodeValueTooLarge    = "value_too_large"    // 400: an election value over 4096 bytes
	CodeUnknownGroup     = "unknown_group"      // 400: a name's "@group" (or ?group=) that the deployment does not run
	CodeUnauthorized     = "unauthorized"       // 401: missing or wrong bearer token
	CodeForbidden        = "forbidden"          // 403: the session's secret missing or wrong, or the token lacks a right
	CodeNotFound         = "not_found"          // 404: unknown or ended session, unknown path
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeRequestTimeout   = "request_timeout"    // 408: the body did not arrive in time after its headers
	CodeStaleToken       = "stale_token"        // 409: release of a grant that is not current
	CodeNotLeader        = "not_leader"         // 409: proclaim or resign of a term that is over
	CodeLocked           = "locked"             // 409: (reserved) the lock is held
	CodeInvalidPermits   = "invalid_permits"    // 400: an acquire's permits out of 1..MaxHoldersPerLock
	CodePermitConflict   = "permit_conflict"    // 409: a semaphore's other permit count, a lock's name for a semaphore (or back), or a re-issued acquire in another mode
	CodeMaxHoldExceeded  = "max_hold_exceeded"  // 409: the grant's max_hold_ms ran out: it is over
	CodeIDRemoved        = "id_removed"         // 409: a membership change naming a replica ID that was removed (IDs are never reused)
	CodeMembership       = "membership"         // 409: a membership change that cannot be made (ID or address in use, the last voter, not a member)
	CodeVersionGated     = "version_gated"      // 409: the call needs a newer log format than its group writes yet (a member runs an older build)
	CodeGroupExists      = "group_exists"       // 409: POST /v1/groups/{name} of a group the table has
	CodeInvalidGroup     = "invalid_group"      // 400: a group name that is not 1 to 32 of [a-z0-9-]
	CodeInvalidVoters    = "invalid_voters"     // 400: voters that are not 1, 3 or 5 distinct members of the deployment, or one taken off the group before
	CodeGroupHoldsLocks  = "group_holds_locks"  // 409: DELETE /v1/groups/{name} of a group holding locks, without force=true
	CodeGroupDropped     = "group_dropped"      // 409: the call's group was dropped while it ran
	CodeGroupMoved       = "group_moved"        // 421: this replica no longer runs the group (SetVoters moved it off): ask a replica that runs it
	CodeTooLarge         = "too_large"          // 413: body over the bound
	CodeMisdirected      = "session_elsewhere"  // 421: no longer answered (any replica serves any session); kept for clients that retry on it
	CodeLimitExceeded    = "limit_exceeded"     // 429: a group limit (sessions, locks per session, waiters)
	CodeTooManyStreams   = "too_many_streams"   // 429: this replica's open watch and observe streams are at the bound
	CodeUnavailable      = "unavailable"        // 503: no leader in time, replica closing
	CodeReplicaRemoved   = "replica_removed"    // 503: this replica was removed from the group: ask another
	CodeNoQuorum         = "no_quorum"          // 503: the group has no leader and this replica reaches too few voters (the message names them)
	CodeInternal         = "internal"           // 500
)

// Error is the body of every error response.
// It is lockapi.ErrorBody, which the Go client decodes too.
type Error = lockapi.ErrorBody

// apiError is an error with its status and code.
type apiError struct {
	status int
	code   string
	msg    string
	owner  uint64
}

func (e *apiError) Error() string { return e.msg }

func newError(status int, code, msg string) *apiError {
	return &apiError{status: status, code: code, msg: msg}
}

var errNoSession = newError(http.StatusNotFound, CodeNotFound, "session not found: it ended, expired, or never existed")

// classify maps an error of the library or of this package to its status
// and code.
func classify(err error) *apiError {
	var ae *apiError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return newError(http.StatusRequestEntityTooLarge, CodeTooLarge, err.Error())
	case errors.Is(err, errBadRequest):
		return newError(http.StatusBadRequest, CodeBadRequest, err.Error())
	case errors.Is(err, fencelock.ErrInvalidName):
		return newError(http.StatusBadRequest, CodeInvalidName, err.Error())
	case errors.Is(err, fencelock.ErrUnknownGroup):
		return newError(http.StatusBadRequest, CodeUnknownGroup, err.Error())
	case errors.Is(err, fencelock.ErrInvalidSessionName):
		return newError(http.StatusBadRequest, CodeBadRequest, err.Error())
	case errors.Is(err, fencelock.ErrInvalidTTL):
		return newError(http.StatusBadRequest, CodeInvalidTTL, err.Error())
	case errors.Is(err, fencelock.ErrValueTooLarge):
		return newError(http.StatusBadRequest, CodeValueTooLarge, err.Error())
	case errors.Is(err, fencelock.ErrInvalidPermits):
		return newError(http.StatusBadRequest, CodeInvalidPermits, err.Error())
	case errors.Is(err, fencelock.ErrInvalidMaxHold):
		return newError(http.StatusBadRequest, CodeBadRequest, err.Error())
	case errors.Is(err, fencelock.ErrPermitConflict):
		return newError(http.StatusConflict, CodePermitConflict, err.Error())
	case errors.Is(err, fencelock.ErrMaxHoldExceeded):
		return newError(http.StatusConflict, CodeMaxHoldExceeded, err.Error())
	case errors.Is(err, fencelock.ErrNotHeld):
		return newError(http.StatusConflict, CodeStaleToken, err.Error())
	case errors.Is(err, fencelock.ErrNotLeader):
		return newError(http.StatusConflict, CodeNotLeader, err.Error())
	case errors.Is(err, fencelock.ErrSessionExpired), errors.Is(err, fencelock.ErrSessionClosed), errors.Is(err, fencelock.ErrRevoked):
		return newError(http.StatusNotFound, CodeNotFound, "session not found: "+err.Error())
	case errors.Is(err, fencelock.ErrGroupExists):
		return newError(http.StatusConflict, CodeGroupExists, err.Error())
	case errors.Is(err, fencelock.ErrInvalidGroupName):
		return newError(http.StatusBadRequest, CodeInvalidGroup, err.Error())
	case errors.Is(err, fencelock.ErrInvalidVoters):
		return newError(http.StatusBadRequest, CodeInvalidVoters, err.Error())
	case errors.Is(err, fencelock.ErrGroupHoldsLocks):
		return newError(http.StatusConflict, CodeGroupHoldsLocks, err.Error())
	case errors.Is(err, fencelock.ErrGroupDropped):
		return newError(http.StatusConflict, CodeGroupDropped, err.Error())
	case errors.Is(err, fencelock.ErrGroupMoved):
		return newError(http.StatusMisdirectedRequest, CodeGroupMoved, err.Error())
	case errors.Is(err, fencelock.ErrIDRemoved):
		return newError(http.StatusConflict, CodeIDRemoved, err.Error())
	case errors.Is(err, fencelock.ErrMembership):
		return newError(http.StatusConflict, CodeMembership, err.Error())
	case errors.Is(err, fencelock.ErrVersionGated):
		return newError(http.StatusConflict, CodeVersionGated, err.Error())
	case errors.Is(err, fencelock.ErrRemoved):
		return newError(http.StatusServiceUnavailable, CodeReplicaRemoved, err.Error())
	case errors.Is(err, fencelock.ErrLimitExceeded):
		return newError(http.StatusTooManyRequests, CodeLimitExceeded, err.Error())
	case errors.Is(err, fencelock.ErrNoQuorum):
		return newError(http.StatusServiceUnavailable, CodeNoQuorum, err.Error())
	case errors.Is(err, fencelock.ErrUnavailable), errors.Is(err, fencelock.ErrClosed),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return newError(http.StatusServiceUnavailable, CodeUnavailable, err.Error())
	}
	return newError(http.StatusInternalServerError, CodeInternal, err.Error())
}

// jsonType is every answer's Content-Type, one slice for all: the server
// copies the header when it writes it.
var jsonType = []string{"application/json"}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(status)
	switch v.(type) {
	case AcquireResponse, ReleaseResponse:
		if b, ok := appendFlat(make([]byte, 0, 160), v); ok {
			_, _ = w.Write(b)
			return
		}
	}
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	e := classify(err)
	if e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.status, Error{Message: e.msg, Code: e.code, Owner: e.owner})
}

// appendFlat appends, for an acquire's or a release's answer (every pair's
// through the service), what encoding/json's Encoder writes for it, newline
// included, without its reflection and one allocation an ID; ok is false,
// and b unchanged, for any other v and for a fence with a byte that
// encoding/json escapes, which is left to it (FuzzWriteFlat).
func appendFlat(b []byte, v any) (_ []byte, ok bool) {
	switch a := v.(type) {
	case AcquireResponse:
		for i := 0; i < len(a.Fence); i++ {
			if c := a.Fence[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return b, false
			}
		}
		b = append(b, `{"granted":`...)
		b = strconv.AppendBool(b, a.Granted)
		if a.FencingToken != 0 {
			b = strconv.AppendUint(append(b, `,"fencing_token":"`...), uint64(a.FencingToken), 10)
			b = append(b, '"')
		}
		if a.Fence != "" {
			b = append(append(append(b, `,"fence":"`...), a.Fence...), '"')
		}
		if a.QueuePosition != 0 {
			b = strconv.AppendInt(append(b, `,"queue_position":`...), int64(a.QueuePosition), 10)
		}
		if a.HolderSession != 0 {
			b = strconv.AppendUint(append(b, `,"holder_session":"`...), uint64(a.HolderSession), 10)
			b = append(b, '"')
		}
		if a.LeaseMS != nil {
			b = strconv.AppendInt(append(b, `,"lease_ms":`...), *a.LeaseMS, 10)
		}
		return append(b, "}\n"...), true
	case ReleaseResponse:
		switch {
		case a.Released && a.Withdrawn:
			return append(b, `{"released":true,"withdrawn":true}`+"\n"...), true
		case a.Released:
			return append(b, `{"released":true}`+"\n"...), true
		case a.Withdrawn:
			return append(b, `{"withdrawn":true}`+"\n"...), true
		}
		return append(b, "{}\n"...), true
	}
	return b, false
}
