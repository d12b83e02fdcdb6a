package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/lockapi"
)

// ID is a 64-bit session ID or fencing token, written as a decimal
// string (lockapi.ID, which the Go client decodes too).
type ID = lockapi.ID

// The request bodies. Every decoder refuses unknown fields, trailing data
// and missing required fields, so that a typo ("wiat") is an error rather
// than a silently different request.

// CreateSessionRequest is the body of POST /v1/sessions; it may be empty.
type CreateSessionRequest struct {
	TTLMillis int64 `json:"ttl_ms,omitempty"`
	// Name names the session in every view of its grants and waits (at
	// most 256 bytes of UTF-8 without NUL); without it the session is
	// named after the client's address.
	Name string `json:"name,omitempty"`
}

// TTL is the requested TTL, 0 for the replica's default.
func (r CreateSessionRequest) TTL() time.Duration {
	return time.Duration(r.TTLMillis) * time.Millisecond
}

// AcquireRequest is the body of POST /v1/locks/{name}/acquire.
type AcquireRequest struct {
	SessionID ID   `json:"session_id"`
	Wait      bool `json:"wait"`
	// Shared asks for the lock in shared mode (Session.AcquireShared).
	Shared bool `json:"shared,omitempty"`
	// Permits, if not 0, asks for one permit of a counting semaphore of
	// that many permits (Session.AcquireSemaphore; shared is implied): 1
	// to fencelock.MaxHoldersPerLock.
	Permits int `json:"permits,omitempty"`
	// MaxHoldMillis, if not 0, bounds how long the grant lasts
	// (fencelock.WithMaxHold).
	MaxHoldMillis int64 `json:"max_hold_ms,omitempty"`
}

// MaxHold is the requested maximum hold, 0 for none.
func (r AcquireRequest) MaxHold() time.Duration {
	return time.Duration(r.MaxHoldMillis) * time.Millisecond
}

// ReleaseRequest is the body of POST /v1/locks/{name}/release. A zero
// FencingToken withdraws the session's queued request instead.
type ReleaseRequest struct {
	SessionID    ID `json:"session_id"`
	FencingToken ID `json:"fencing_token"`
}

// CampaignRequest is the body of POST /v1/elections/{name}/campaign.
type CampaignRequest struct {
	SessionID ID     `json:"session_id"`
	Value     string `json:"value"`
	Wait      bool   `json:"wait"`
}

// ProclaimRequest is the body of POST /v1/elections/{name}/proclaim.
type ProclaimRequest struct {
	SessionID ID     `json:"session_id"`
	Token     ID     `json:"token"`
	Value     string `json:"value"`
}

// ResignRequest is the body of POST /v1/elections/{name}/resign. A zero
// Token withdraws the session's queued candidacy instead.
type ResignRequest struct {
	SessionID ID `json:"session_id"`
	Token     ID `json:"token"`
}

// errBadRequest marks a body that could not be decoded; its message says why.
var errBadRequest = errors.New("bad request")

// decodeJSON decodes exactly one JSON object from b into v, refusing unknown
// fields and trailing data. An empty body is allowed only when empty is true.
func decodeJSON(b []byte, v any, empty bool) error {
	if len(bytes.TrimSpace(b)) == 0 {
		if empty {
			return nil
		}
		return fmt.Errorf("%w: empty body, expected a JSON object", errBadRequest)
	}
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: body is not UTF-8", errBadRequest)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the JSON object", errBadRequest)
	}
	return nil
}

func needSession(id ID) error {
	if id == 0 {
		return fmt.Errorf("%w: session_id is required", errBadRequest)
	}
	return nil
}

// DecodeCreateSession decodes the body of POST /v1/sessions.
func DecodeCreateSession(b []byte) (CreateSessionRequest, error) {
	var r CreateSessionRequest
	if err := decodeJSON(b, &r, true); err != nil {
		return r, err
	}
	if r.TTLMillis < 0 {
		return r, fmt.Errorf("%w: ttl_ms %d is negative", fencelock.ErrInvalidTTL, r.TTLMillis)
	}
	if r.TTLMillis > int64(24*time.Hour/time.Millisecond) {
		return r, fmt.Errorf("%w: ttl_ms %d is over 24h", fencelock.ErrInvalidTTL, r.TTLMillis)
	}
	if len(r.Name) > fencelock.MaxSessionNameLen || !utf8.ValidString(r.Name) || strings.ContainsRune(r.Name, 0) {
		return r, fmt.Errorf("%w: name must be at most %d bytes of UTF-8 without NUL", fencelock.ErrInvalidSessionName,
			fencelock.MaxSessionNameLen)
	}
	return r, nil
}

// DecodeAcquire decodes the body of an acquire.
func DecodeAcquire(b []byte) (AcquireRequest, error) {
	var r AcquireRequest
	if err := decodeJSON(b, &r, false); err != nil {
		return r, err
	}
	if r.Permits < 0 || r.Permits > fencelock.MaxHoldersPerLock {
		return r, fmt.Errorf("%w: permits %d, allowed 1 to %d", fencelock.ErrInvalidPermits, r.Permits,
			fencelock.MaxHoldersPerLock)
	}
	if r.MaxHoldMillis < 0 || r.MaxHoldMillis > int64(fencelock.MaxHoldLimit/time.Millisecond) {
		return r, fmt.Errorf("%w: max_hold_ms %d, allowed 0 (none) to %d", errBadRequest, r.MaxHoldMillis,
			int64(fencelock.MaxHoldLimit/time.Millisecond))
	}
	return r, needSession(r.SessionID)
}

// DecodeRelease decodes the body of a release.
func DecodeRelease(b []byte) (ReleaseRequest, error) {
	var r ReleaseRequest
	if err := decodeJSON(b, &r, false); err != nil {
		return r, err
	}
	return r, needSession(r.SessionID)
}

// DecodeCampaign decodes the body of a campaign.
func DecodeCampaign(b []byte) (CampaignRequest, error) {
	var r CampaignRequest
	if err := decodeJSON(b, &r, false); err != nil {
		return r, err
	}
	if len(r.Value) > fencelock.MaxValueLen {
		return r, fmt.Errorf("%w: %d bytes", fencelock.ErrValueTooLarge, len(r.Value))
	}
	return r, needSession(r.SessionID)
}

// DecodeProclaim decodes the body of a proclaim.
func DecodeProclaim(b []byte) (ProclaimRequest, error) {
	var r ProclaimRequest
	if err := decodeJSON(b, &r, false); err != nil {
		return r, err
	}
	if len(r.Value) > fencelock.MaxValueLen {
		return r, fmt.Errorf("%w: %d bytes", fencelock.ErrValueTooLarge, len(r.Value))
	}
	if r.Token == 0 {
		return r, fmt.Errorf("%w: token is required", errBadRequest)
	}
	return r, needSession(r.SessionID)
}

// DecodeResign decodes the body of a resign.
func DecodeResign(b []byte) (ResignRequest, error) {
	var r ResignRequest
	if err := decodeJSON(b, &r, false); err != nil {
		return r, err
	}
	return r, needSession(r.SessionID)
}

// validName applies the library's rule for lock and election names
// (ErrInvalidName) before any call, so that a read of a bad name is refused
// like a write.
func validName(name string) error {
	if why := fsm.NameProblem(name); why != "" {
		return fmt.Errorf("%w: %s", fencelock.ErrInvalidName, why)
	}
	return nil
}

// parseID parses a session ID from a path or query.
func parseID(s string) (ID, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("%w: %.40q is not a session ID (a positive decimal integer)", errBadRequest, s)
	}
	return ID(v), nil
}
