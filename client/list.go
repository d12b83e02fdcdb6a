package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/lockapi"
)

// The list calls: what `fencelock status`, `locks` and `sessions` show.
// Their types are the API's JSON (docs/http.md) field for field, with the
// same tags, so that a tool that prints them as JSON prints what the API
// sent.

// ID is a session ID or a fencing token in a listing: a uint64, sent as a
// decimal string (a JSON number is read too). It is lockapi.ID.
type ID = lockapi.ID

// ReplicaStatus is one replica's GET /v1/status: its local view, without a
// round of the group (a replica cut off from the others answers it too,
// with what it last knew). It is lockapi.StatusJSON, the type the service
// writes; Status and Replicas keep the answer as sent in its Raw.
type ReplicaStatus = lockapi.StatusJSON

// GroupStatus is one group a replica runs, in ReplicaStatus.Groups.
type GroupStatus = lockapi.GroupJSON

// Formats is a pair of format versions: of the log entries and of the
// snapshots.
type Formats = lockapi.FormatsJSON

// ReplicaVersion is what a replica runs: its build, and the newest log and
// snapshot formats it reads.
type ReplicaVersion = lockapi.VersionJSON

// EndpointStatus is one endpoint's answer to Replicas: its status, or why
// it gave none.
type EndpointStatus struct {
	Endpoint string // the base URL asked
	Status   ReplicaStatus
	Err      error // nil when Status is its answer
}

// LockList is every held lock a Locks call listed, or a Contended ranking.
type LockList struct {
	// Group is the group listed ("" is the default group, or with
	// AllGroups every group): each lock's session IDs are IDs in its
	// Group.
	Group string `json:"group"`
	// AllGroups: Locks was given no group, and lists every group's locks
	// in name order, each with its Group.
	AllGroups bool        `json:"all_groups,omitempty"`
	Locks     []LockEntry `json:"locks"`
}

// LockEntry is one lock of a listing (lockapi.LockJSON). Locks fills its
// Group from the name for a server that sends none.
type LockEntry = lockapi.LockJSON

// HolderEntry is one current grant of a listed lock.
type HolderEntry = lockapi.HolderJSON

// WaiterEntry is one waiting request of a listed lock.
type WaiterEntry = lockapi.WaiterJSON

// SessionList is every open session a Sessions call listed.
type SessionList struct {
	Group    string         `json:"group"` // "": the default group
	Sessions []SessionEntry `json:"sessions"`
}

// SessionEntry is one open session of a listing (lockapi.SessionJSON). In
// a named group it is the part a session opened there: SessionID is the
// session's (0 if the group does not know it: see LockEntry), PartID the
// part's in that group.
type SessionEntry = lockapi.SessionJSON

// Status returns the status of the first endpoint that answers (GET
// /v1/status), failing over as every call does. It fails with an error
// wrapping fencelock.ErrUnavailable when no endpoint answered, and with
// ErrBadAnswer for an answer that is not a status.
func (c *Client) Status(ctx context.Context) (ReplicaStatus, error) {
	var raw json.RawMessage
	if err := c.call(ctx, callSpec{method: "GET", path: "/v1/status"}, &raw); err != nil {
		return ReplicaStatus{}, err
	}
	return readStatus(raw, "status")
}

// readStatus decodes a status answer, keeping it as Raw. A status without
// a replica ID is no status of this API.
func readStatus(raw json.RawMessage, endpoint string) (ReplicaStatus, error) {
	var st ReplicaStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		return ReplicaStatus{}, &badAnswerError{endpoint: endpoint, err: err}
	}
	if st.ReplicaID == 0 {
		return ReplicaStatus{}, &badAnswerError{endpoint: endpoint, err: fmt.Errorf("a status without replica_id")}
	}
	st.Raw = raw
	return st, nil
}

// Replicas asks every endpoint for its status at once, each within within
// (0: the client's AttemptTimeout), and returns their answers in the
// order of Config.Endpoints: the point is which endpoints answer now, so it
// neither fails over nor retries. It never fails as a whole; each
// EndpointStatus says whether its endpoint answered.
func (c *Client) Replicas(ctx context.Context, within time.Duration) []EndpointStatus {
	if within <= 0 {
		within = c.attempt
	}
	out := make([]EndpointStatus, len(c.bases))
	c.askEveryStatus(ctx, within, func(i int, base string, raw json.RawMessage, err error) {
		out[i].Endpoint = base
		if err != nil {
			out[i].Err = err
			return
		}
		out[i].Status, out[i].Err = readStatus(raw, base)
	})
	return out
}

// lockPage and sessionPage are one page of GET /v1/locks and /v1/sessions.
type lockPage struct {
	Group     string      `json:"group"`
	AllGroups bool        `json:"all_groups"`
	Locks     []LockEntry `json:"locks"`
	More      bool        `json:"more"`
	Next      string      `json:"next"`
}

type sessionPage struct {
	Group    string         `json:"group"`
	Sessions []SessionEntry `json:"sessions"`
	More     bool           `json:"more"`
	Next     string         `json:"next"`
}

// Locks lists every held lock whose name starts with prefix, in name
// order, in group (GET /v1/locks, page after page; a linearizable read on
// the replica). A prefix ending in "@group" lists that group (as the
// embedded Node.Locks reads it); with group "" and a prefix without '@' it
// lists every group the deployment runs (AllGroups, each lock with its
// Group). Each page costs each group it lists a pass over its lock table:
// list sparingly.
//
// It fails with fencelock.ErrUnknownGroup for a group the deployment does
// not run, ErrBadRequest for a prefix whose "@group" is not group, an
// error wrapping
// fencelock.ErrUnavailable when no endpoint answered, and ErrBadAnswer for
// pages that do not move forward (a listing that would never end).
func (c *Client) Locks(ctx context.Context, prefix, group string) (LockList, error) {
	var all LockList
	after := ""
	for {
		q := url.Values{"prefix": {prefix}}
		if group != "" {
			q.Set("group", group)
		}
		if after != "" {
			q.Set("after", after)
		}
		var page lockPage
		if err := c.call(ctx, callSpec{method: "GET", path: "/v1/locks?" + q.Encode()}, &page); err != nil {
			return LockList{}, err
		}
		for i, l := range page.Locks {
			if l.Group == "" {
				_, page.Locks[i].Group, _ = lockapi.SplitName(l.Name)
			}
		}
		all.Locks = append(all.Locks, page.Locks...)
		all.Group, all.AllGroups = page.Group, page.AllGroups
		if !page.More || page.Next == "" {
			return all, nil
		}
		if page.Next <= after {
			// Names are listed in order: a page that does not start after
			// the last would repeat forever.
			return LockList{}, &badAnswerError{endpoint: "locks", err: fmt.Errorf("page after %q continues at %q", clean(after, 64), clean(page.Next, 64))}
		}
		after = page.Next
	}
}

// Contended returns the n locks of group ("" the default group) with the
// longest queues, longest first (GET /v1/locks?sort=waiters): what everyone
// waits for. n is 1 to fencelock.MaxContended, else it fails with
// fencelock.ErrInvalidConfig before any call; otherwise it fails as Locks.
func (c *Client) Contended(ctx context.Context, group string, n int) (LockList, error) {
	if n < 1 || n > lockapi.MaxContended {
		return LockList{}, fmt.Errorf("%w: %d locks: want 1 to %d", lockapi.ErrInvalidConfig, n, lockapi.MaxContended)
	}
	q := url.Values{"sort": {"waiters"}, "limit": {strconv.Itoa(n)}}
	if group != "" {
		q.Set("group", group)
	}
	var page lockPage
	if err := c.call(ctx, callSpec{method: "GET", path: "/v1/locks?" + q.Encode()}, &page); err != nil {
		return LockList{}, err
	}
	return LockList{Group: page.Group, Locks: page.Locks}, nil
}

// Sessions lists every open session of group ("" the default group) in part
// ID order (session ID order in the default group),
// wherever it was opened (GET /v1/sessions, page after page; a
// linearizable read, costing like Locks). It fails as Locks does.
func (c *Client) Sessions(ctx context.Context, group string) (SessionList, error) {
	all := SessionList{Group: group}
	var after uint64
	for {
		q := url.Values{}
		if group != "" {
			q.Set("group", group)
		}
		if after != 0 {
			q.Set("after", strconv.FormatUint(after, 10))
		}
		path := "/v1/sessions"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		var page sessionPage
		if err := c.call(ctx, callSpec{method: "GET", path: path}, &page); err != nil {
			return SessionList{}, err
		}
		all.Sessions = append(all.Sessions, page.Sessions...)
		if !page.More || page.Next == "" {
			return all, nil
		}
		next, err := strconv.ParseUint(page.Next, 10, 64)
		if err != nil || next <= after {
			// IDs are listed in order: a page that does not start after
			// the last would repeat forever.
			return SessionList{}, &badAnswerError{endpoint: "sessions", err: fmt.Errorf("page after %d continues at %q", after, clean(page.Next, 64))}
		}
		after = next
	}
}
