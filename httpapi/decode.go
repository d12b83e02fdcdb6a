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
	if !flatAcquire(b, &r) {
		var j AcquireRequest // apart from r, so that only this path allocates it
		if err := decodeJSON(b, &j, false); err != nil {
			return j, err
		}
		r = j
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
	if !flatRelease(b, &r) {
		var j ReleaseRequest // apart from r, so that only this path allocates it
		if err := decodeJSON(b, &j, false); err != nil {
			return j, err
		}
		r = j
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

// The bodies of an acquire and a release, the calls of every lock's
// handover, are read without encoding/json's reflection when they have the
// form every client writes: decodeJSON's decoder, its reader and its
// tokens cost a dozen allocations a call. flatAcquire and flatRelease
// accept only what decodeJSON accepts with the same result (their
// fuzz test compares the two), and leave everything else to it, errors
// and their messages included.

// flatValue is one value of a flat object (scanFlat).
type flatValue struct {
	kind byte   // '"': a string of decimal digits; '0': a non-negative integer; 'b': a boolean
	raw  []byte // the digits, for '"' and '0'
	b    bool
}

// scanFlat reads b as one JSON object of at most 8 members whose keys
// are plain ASCII, each once, and whose values are strings of 1 to 20
// decimal digits, non-negative integers without fraction or exponent, or
// booleans, with only JSON whitespace around it; it calls set with each
// member in turn. It returns false as soon as b is anything else, or set
// refuses a member.
func scanFlat(b []byte, set func(key []byte, v flatValue) bool) bool {
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	ws()
	if i == len(b) || b[i] != '{' {
		return false
	}
	i++
	ws()
	if i < len(b) && b[i] == '}' {
		i++
		ws()
		return i == len(b)
	}
	var keys [8][]byte // a body has at most five members
	n := 0
	for {
		if i == len(b) || b[i] != '"' {
			return false
		}
		i++
		start := i
		for i < len(b) && b[i] != '"' {
			if c := b[i]; c < 0x20 || c >= 0x80 || c == '\\' {
				return false
			}
			i++
		}
		if i == len(b) || n == len(keys) {
			return false
		}
		key := b[start:i]
		for _, k := range keys[:n] {
			if string(k) == string(key) {
				return false // encoding/json takes the last; leave it to it
			}
		}
		keys[n] = key
		n++
		i++
		ws()
		if i == len(b) || b[i] != ':' {
			return false
		}
		i++
		ws()
		if i == len(b) {
			return false
		}
		var v flatValue
		switch c := b[i]; {
		case c == '"':
			i++
			start := i
			for i < len(b) && b[i] >= '0' && b[i] <= '9' {
				i++
			}
			if i == len(b) || b[i] != '"' || i == start || i-start > 20 {
				return false
			}
			v = flatValue{kind: '"', raw: b[start:i]}
			i++
		case c >= '0' && c <= '9':
			start := i
			for i < len(b) && b[i] >= '0' && b[i] <= '9' {
				i++
			}
			if (b[start] == '0' && i-start > 1) || i-start > 19 {
				return false
			}
			if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
				return false
			}
			v = flatValue{kind: '0', raw: b[start:i]}
		case bytes.HasPrefix(b[i:], []byte("true")):
			v = flatValue{kind: 'b', b: true}
			i += 4
		case bytes.HasPrefix(b[i:], []byte("false")):
			v = flatValue{kind: 'b'}
			i += 5
		default:
			return false
		}
		if !set(key, v) {
			return false
		}
		ws()
		if i == len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i++
			ws()
		case '}':
			i++
			ws()
			return i == len(b)
		default:
			return false
		}
	}
}

// flatID reads an ID member: a string of digits or an integer, as
// lockapi.ID reads it.
func flatID(v flatValue, id *ID) bool {
	if v.kind != '"' && v.kind != '0' {
		return false
	}
	n, err := strconv.ParseUint(string(v.raw), 10, 64)
	*id = ID(n)
	return err == nil
}

// flatInt reads an integer member into an int64 (or, with bits 0, an int).
func flatInt(v flatValue, bits int, out *int64) bool {
	if v.kind != '0' {
		return false
	}
	n, err := strconv.ParseInt(string(v.raw), 10, bits)
	*out = n
	return err == nil
}

// flatAcquire reads an acquire's body of the common form into r (scanFlat).
func flatAcquire(b []byte, r *AcquireRequest) bool {
	return scanFlat(b, func(key []byte, v flatValue) bool {
		switch string(key) {
		case "session_id":
			return flatID(v, &r.SessionID)
		case "wait":
			r.Wait = v.b
			return v.kind == 'b'
		case "shared":
			r.Shared = v.b
			return v.kind == 'b'
		case "permits":
			var n int64
			ok := flatInt(v, strconv.IntSize, &n)
			r.Permits = int(n)
			return ok
		case "max_hold_ms":
			return flatInt(v, 64, &r.MaxHoldMillis)
		}
		return false
	})
}

// flatRelease reads a release's body of the common form into r (scanFlat).
func flatRelease(b []byte, r *ReleaseRequest) bool {
	return scanFlat(b, func(key []byte, v flatValue) bool {
		switch string(key) {
		case "session_id":
			return flatID(v, &r.SessionID)
		case "fencing_token":
			return flatID(v, &r.FencingToken)
		}
		return false
	})
}
