package lockapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The HTTP API's JSON (docs/http.md) that a replica's service (httpapi)
// writes and the Go client reads: one set of types, so that the two cannot
// drift apart. A reader ignores unknown fields, so that a replica of a
// later version, which adds fields, is still understood.

// ID is a 64-bit session ID or fencing token. It is written as a decimal
// string, as the protobuf JSON mapping writes 64-bit integers, so that
// JavaScript clients (whose numbers are doubles) lose nothing; a JSON
// number is accepted too, for hand-written curl calls, and null leaves it
// as it was (as encoding/json does for its own types).
type ID uint64

// MarshalJSON writes the ID as a decimal string.
func (id ID) MarshalJSON() ([]byte, error) {
	// One allocation: every call of the API writes two or three IDs.
	b := make([]byte, 0, 22) // '"', 20 digits, '"'
	b = append(b, '"')
	b = strconv.AppendUint(b, uint64(id), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON reads a decimal string or a non-negative integer number;
// anything else is an error, never a panic.
func (id *ID) UnmarshalJSON(b []byte) error {
	t := bytes.TrimSpace(b)
	if string(t) == "null" {
		return nil
	}
	digits := t
	if len(t) > 0 && t[0] == '"' {
		if j := bytes.Trim(b, " \t\r\n"); len(j) >= 2 && j[0] == '"' && j[len(j)-1] == '"' &&
			bytes.IndexByte(j[1:len(j)-1], '\\') < 0 {
			// A string without escapes, as every writer of the API sends
			// it: its bytes are the digits (anything else in it fails
			// below, as it fails encoding/json), with no decoder to
			// allocate.
			digits = j[1 : len(j)-1]
		} else {
			var str string
			if err := json.Unmarshal(b, &str); err != nil {
				return err
			}
			digits = []byte(str)
		}
	}
	v, err := strconv.ParseUint(string(digits), 10, 64)
	if err != nil {
		return fmt.Errorf("not a decimal 64-bit unsigned integer: %.40q", digits)
	}
	*id = ID(v)
	return nil
}

func (id ID) String() string { return strconv.FormatUint(uint64(id), 10) }

// SessionResponse answers POST /v1/sessions and heartbeats.
type SessionResponse struct {
	SessionID ID `json:"session_id,omitempty"`
	// SessionSecret is the session's credential, in the create response
	// only: every call acting on the session sends it in the
	// Fencelock-Session-Secret header. No other answer shows it.
	SessionSecret string `json:"session_secret,omitempty"`
	TimeoutMS     int64  `json:"timeout_ms"`
	// LeaseMS is how long after sending the heartbeat (or the create) whose
	// answer this is the client may act as holder of everything the session
	// holds, in every group: stop acting by then unless a later heartbeat
	// was answered. It is the shortest of Leases over the groups where the
	// session holds a lock, a leadership or a request (and the default
	// group): a heartbeat that could not renew such a group fails instead.
	LeaseMS int64 `json:"lease_ms"`
	// Leases is the lease of the session's part in each group it has one
	// in, by group name ("" the default group), in milliseconds from the
	// send of the heartbeat: TTL − 2·margin for a part this heartbeat
	// renewed, 0 for one it did not (it promises nothing, and ends by its
	// own deadline at the replica).
	Leases map[string]int64 `json:"leases,omitempty"`
}

// AcquireResponse answers an acquire.
type AcquireResponse struct {
	Granted      bool `json:"granted"`
	FencingToken ID   `json:"fencing_token,omitempty"`
	// Fence is the token with the group's ID, "GROUP:TOKEN" (fencelock.Fence).
	Fence string `json:"fence,omitempty"`
	// QueuePosition is 1 for the next in line; set while waiting.
	QueuePosition int `json:"queue_position,omitempty"`
	// HolderSession is the session's part ID in the lock's group, with a
	// grant or a place in the queue: what the lock's views and watch
	// events name as its part_id. It is session_id in the default group;
	// in a named group ("name@group") it is the ID of the session's part
	// there (the views name the session itself by its session_id).
	HolderSession ID `json:"holder_session,omitempty"`
	// LeaseMS, in an answer that grants, is how long after sending this
	// call the client may act as holder of the grant: the time its
	// session's part in the lock's group had left when the call arrived,
	// less a margin, at most a heartbeat's lease_ms. The client acts on
	// everything its session holds until the earlier of this and its
	// heartbeats' lease; a heartbeat sent after this answer arrived, and
	// answered OK, renews that part too (it now holds something). Absent
	// without a grant (and from servers before it).
	LeaseMS *int64 `json:"lease_ms,omitempty"`
}

// LockJSON describes a lock.
type LockJSON struct {
	Name string `json:"name"`
	// Group is the group the lock lives in, its name's "@group" ("": the
	// default group): its tokens are that group's. Every session_id in it
	// is a session's ID (the default group's: the API's session_id), and
	// in a named group every part_id the ID of that session's part there.
	// A session_id is 0 (holder_session absent) for a part opened before
	// its group wrote log version 10: its part_id names it.
	Group         string `json:"group"`
	Held          bool   `json:"held"`
	HolderSession ID     `json:"holder_session,omitempty"` // the oldest holder's session_id
	HolderPart    ID     `json:"holder_part,omitempty"`    // its part_id: in a named group only
	HolderName    string `json:"holder_name,omitempty"`    // its session's name
	// GrantedAt is when the oldest grant was made (RFC 3339, by the
	// proposing replica's clock), HeldForMS how long ago that was by this
	// replica's: both absent when free or unknown.
	GrantedAt    string `json:"granted_at,omitempty"`
	HeldForMS    int64  `json:"held_for_ms,omitempty"`
	FencingToken ID     `json:"fencing_token,omitempty"` // the oldest holder's
	Owner        uint64 `json:"owner,omitempty"`         // the replica the oldest holder's session lives on
	// Shared and Permits tell a shared lock's or a semaphore's holders
	// (taken in Go with AcquireShared, AcquireSemaphore); Holders lists
	// every current grant, oldest first.
	Shared  bool         `json:"shared,omitempty"`
	Permits int          `json:"permits,omitempty"`
	Holders []HolderJSON `json:"holders"`
	Waiters int          `json:"waiters"`
	// Queue is the waiting sessions, head first: all of them from GET
	// /v1/locks/{name}, the first 16 in a listing (Waiters counts them all).
	Queue []ID `json:"queue"`
	// Waiting is the same waiting requests with their sessions' names and
	// places.
	Waiting []WaiterJSON `json:"waiting"`
}

// HolderJSON is one current grant of a lock.
type HolderJSON struct {
	Session      ID     `json:"session_id"`
	Part         ID     `json:"part_id,omitempty"` // in a named group: the session's part there
	Name         string `json:"name"`              // the holder's session's name
	FencingToken ID     `json:"fencing_token"`
	Owner        uint64 `json:"owner"`
	GrantedAt    string `json:"granted_at,omitempty"`  // RFC 3339; absent: unknown
	HeldForMS    int64  `json:"held_for_ms,omitempty"` // by this replica's clock
}

// WaiterJSON is one waiting request of a lock.
type WaiterJSON struct {
	Session  ID     `json:"session_id"`
	Part     ID     `json:"part_id,omitempty"` // in a named group: the session's part there
	Name     string `json:"name"`
	Place    int    `json:"place"` // 1: next
	Owner    uint64 `json:"owner"`
	Shared   bool   `json:"shared,omitempty"`
	QueuedAt string `json:"queued_at,omitempty"`
	// WaitedMS is how long it has waited, by this replica's clock.
	WaitedMS int64 `json:"waited_ms,omitempty"`
}

// SessionJSON describes a session in GET /v1/sessions. In a named group
// it is a session's part there: SessionID is the session's (0 for a part
// opened before the group wrote log version 10), PartID the part's ID in
// that group, which pages go by.
type SessionJSON struct {
	SessionID ID     `json:"session_id"`
	PartID    ID     `json:"part_id,omitempty"` // in a named group
	Name      string `json:"name"`
	Owner     int64  `json:"owner"`
	TimeoutMS int64  `json:"timeout_ms"`
	Held      int    `json:"held"`
	Waiting   int    `json:"waiting"`
}

// TTL returns the session's time to live.
func (s SessionJSON) TTL() time.Duration { return time.Duration(s.TimeoutMS) * time.Millisecond }

// CampaignResponse answers a campaign.
type CampaignResponse struct {
	Elected bool   `json:"elected"`
	Token   ID     `json:"token,omitempty"` // the term's epoch
	Fence   string `json:"fence,omitempty"`
	Value   string `json:"value,omitempty"`
	// QueuePosition is 1 for the next candidate to lead; set while waiting.
	QueuePosition int `json:"queue_position,omitempty"`
	// HolderSession is the session's part ID in the election's group, as
	// AcquireResponse's: what the election's views name as its part_id
	// (its session_id in the default group).
	HolderSession ID `json:"holder_session,omitempty"`
	// LeaseMS, in a campaign's answer that elects, is AcquireResponse's:
	// how long after sending the call the client may act as leader.
	LeaseMS *int64 `json:"lease_ms,omitempty"`
}

// LeaderJSON describes an election's leader.
type LeaderJSON struct {
	SessionID ID     `json:"session_id"`
	PartID    ID     `json:"part_id,omitempty"` // in a named group: the session's part there (see LockJSON)
	Name      string `json:"name,omitempty"`    // its session's name
	Value     string `json:"value"`
	Token     ID     `json:"token"`
	// ElectedAt is when it was elected (RFC 3339), LeadingForMS how long
	// ago by this replica's clock; absent when unknown (and in observe
	// events, which come from the log and carry neither).
	ElectedAt    string `json:"elected_at,omitempty"`
	LeadingForMS int64  `json:"leading_for_ms,omitempty"`
}

// CandidateJSON is a queued candidate.
type CandidateJSON struct {
	SessionID ID     `json:"session_id"`
	PartID    ID     `json:"part_id,omitempty"` // in a named group: the session's part there (see LockJSON)
	Name      string `json:"name"`
	Place     int    `json:"place"` // 1 leads next
	Value     string `json:"value"`
	Replica   uint64 `json:"replica"`
	QueuedAt  string `json:"queued_at,omitempty"`
	WaitedMS  int64  `json:"waited_ms,omitempty"`
}

// ElectionJSON answers GET /v1/elections/{name}.
type ElectionJSON struct {
	Name       string          `json:"name"`
	Leader     *LeaderJSON     `json:"leader"` // null without a leader
	Candidates []CandidateJSON `json:"candidates"`
	Total      int             `json:"total"`
}

// ObserveEvent is the data of one observe event.
type ObserveEvent struct {
	Name   string      `json:"name"`
	Leader *LeaderJSON `json:"leader"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Message string `json:"error"`
	Code    string `json:"code"`
	// Owner is the replica that owns the session, for session_elsewhere.
	Owner uint64 `json:"owner,omitempty"`
}
