package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/lockapi"
)

// The API's JSON, as this client reads it. Unknown fields are ignored, so
// that a replica of a later version, which adds fields, is still understood;
// every field is checked where it is used, so that a garbage answer is an
// error and never a panic.

// wid is a 64-bit ID or token: a decimal string, or a JSON number.
type wid uint64

func (id wid) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatUint(uint64(id), 10) + `"`), nil
}

func (id *wid) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if s == "null" {
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		s = str
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("not a decimal 64-bit unsigned integer: %.40q", s)
	}
	*id = wid(v)
	return nil
}

type sessionAnswer struct {
	SessionID     wid              `json:"session_id"`
	SessionSecret string           `json:"session_secret"`
	TimeoutMS     int64            `json:"timeout_ms"`
	LeaseMS       int64            `json:"lease_ms"`
	Leases        map[string]int64 `json:"leases"`
}

// acquireAnswer and campaignAnswer: LeaseMS, with a grant, is how long
// after the call's send the grant may be acted on; nil from a server
// before it.
type acquireAnswer struct {
	Granted       bool   `json:"granted"`
	FencingToken  wid    `json:"fencing_token"`
	Fence         string `json:"fence"`
	QueuePosition int    `json:"queue_position"`
	HolderSession wid    `json:"holder_session"`
	LeaseMS       *int64 `json:"lease_ms"`
}

type campaignAnswer struct {
	Elected       bool   `json:"elected"`
	Token         wid    `json:"token"`
	Fence         string `json:"fence"`
	Value         string `json:"value"`
	QueuePosition int    `json:"queue_position"`
	HolderSession wid    `json:"holder_session"`
	LeaseMS       *int64 `json:"lease_ms"`
}

type holderJSON struct {
	Session      wid    `json:"session_id"`
	Part         wid    `json:"part_id"`
	Name         string `json:"name"`
	FencingToken wid    `json:"fencing_token"`
	Owner        uint64 `json:"owner"`
	GrantedAt    string `json:"granted_at"`
}

type waiterJSON struct {
	Session  wid    `json:"session_id"`
	Part     wid    `json:"part_id"`
	Name     string `json:"name"`
	Place    int    `json:"place"`
	Owner    uint64 `json:"owner"`
	Shared   bool   `json:"shared"`
	QueuedAt string `json:"queued_at"`
}

type lockJSON struct {
	Name          string       `json:"name"`
	Held          bool         `json:"held"`
	HolderSession wid          `json:"holder_session"`
	HolderPart    wid          `json:"holder_part"`
	HolderName    string       `json:"holder_name"`
	GrantedAt     string       `json:"granted_at"`
	FencingToken  wid          `json:"fencing_token"`
	Shared        bool         `json:"shared"`
	Permits       int          `json:"permits"`
	Holders       []holderJSON `json:"holders"`
	Waiters       int          `json:"waiters"`
	Queue         []wid        `json:"queue"`
	Waiting       []waiterJSON `json:"waiting"`
}

type leaderJSON struct {
	SessionID wid    `json:"session_id"`
	PartID    wid    `json:"part_id"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Token     wid    `json:"token"`
	ElectedAt string `json:"elected_at"`
}

type observeEvent struct {
	Name   string      `json:"name"`
	Leader *leaderJSON `json:"leader"`
}

type electionJSON struct {
	Name   string      `json:"name"`
	Leader *leaderJSON `json:"leader"`
}

type errorEvent struct {
	Message string `json:"error"`
	Code    string `json:"code"`
}

// decodeAnswer reads one JSON value into out.
func decodeAnswer(b []byte, out any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("empty body")
	}
	return json.Unmarshal(b, out)
}

// parseTime reads an RFC 3339 time the API sent; the zero Time for "" or
// garbage (a time is shown, never acted on).
func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// fenceOf reads a grant's fence: "GROUP:TOKEN", or the bare token when the
// answer has no fence. Its token must be the answer's.
func fenceOf(s string, token uint64) (lockapi.Fence, error) {
	if token == 0 {
		return lockapi.Fence{}, fmt.Errorf("a grant without a token")
	}
	if s == "" {
		return lockapi.Fence{Token: token}, nil
	}
	f, err := lockapi.ParseFence(s)
	if err != nil {
		return lockapi.Fence{}, err
	}
	if f.Token != token {
		return lockapi.Fence{}, fmt.Errorf("fence %q does not carry token %d", clean(s, 64), token)
	}
	return f, nil
}

// partOf is the PartID of a view's session: its part_id, which the API
// sends in a named group only; in the default group (and from a server
// before part_id) none, and the part is the session.
func partOf(session, part wid) uint64 {
	if part != 0 {
		return uint64(part)
	}
	return uint64(session)
}

func (l lockJSON) info() lockapi.LockInfo {
	out := lockapi.LockInfo{Name: l.Name, Held: l.Held, Token: uint64(l.FencingToken), SessionID: uint64(l.HolderSession),
		PartID:  partOf(l.HolderSession, l.HolderPart),
		Waiters: l.Waiters, Shared: l.Shared, Permits: l.Permits, SessionName: l.HolderName, GrantedAt: parseTime(l.GrantedAt)}
	for _, h := range l.Holders {
		out.Holders = append(out.Holders, lockapi.Holder{SessionID: uint64(h.Session), PartID: partOf(h.Session, h.Part), Token: uint64(h.FencingToken),
			Owner: h.Owner, Name: h.Name, GrantedAt: parseTime(h.GrantedAt)})
	}
	for _, q := range l.Queue {
		out.Queue = append(out.Queue, uint64(q))
	}
	for _, w := range l.Waiting {
		out.Waiting = append(out.Waiting, lockapi.Waiter{SessionID: uint64(w.Session), PartID: partOf(w.Session, w.Part), Name: w.Name, Place: w.Place,
			Owner: w.Owner, Shared: w.Shared, QueuedAt: parseTime(w.QueuedAt)})
	}
	return out
}

func (l *leaderJSON) info(election string) lockapi.LeaderInfo {
	if l == nil {
		return lockapi.LeaderInfo{Election: election}
	}
	return lockapi.LeaderInfo{Election: election, Value: l.Value, Token: uint64(l.Token), SessionID: uint64(l.SessionID),
		PartID:      partOf(l.SessionID, l.PartID),
		SessionName: l.Name, ElectedAt: parseTime(l.ElectedAt)}
}
