package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/lockapi"
)

// The API's JSON, as this client reads it. Unknown fields are ignored, so
// that a replica of a later version, which adds fields, is still understood;
// every field is checked where it is used, so that a garbage answer is an
// error and never a panic.

// The API's types are lockapi's, the ones the service writes; this
// package names them for what it does with them.
type (
	wid            = lockapi.ID
	sessionAnswer  = lockapi.SessionResponse
	acquireAnswer  = lockapi.AcquireResponse
	campaignAnswer = lockapi.CampaignResponse
	lockJSON       = lockapi.LockJSON
	leaderJSON     = lockapi.LeaderJSON
	observeEvent   = lockapi.ObserveEvent
	electionJSON   = lockapi.ElectionJSON
	errorEvent     = lockapi.ErrorBody
)

// acquireBody is the body of an acquire ({"session_id":"1","wait":true},
// and the mode's fields when set), and releaseBody a release's, written
// without encoding/json's reflection: they are a lock's every handover,
// and the service reads them in this form without it too.
func acquireBody(session uint64, wait bool, m lockMode) []byte {
	b := make([]byte, 0, 112)
	b = append(b, `{"session_id":"`...)
	b = strconv.AppendUint(b, session, 10)
	b = append(b, `","wait":`...)
	b = strconv.AppendBool(b, wait)
	if m.shared {
		b = append(b, `,"shared":true`...)
	}
	if m.permits != 0 {
		b = append(b, `,"permits":`...)
		b = strconv.AppendInt(b, int64(m.permits), 10)
	}
	if ms := m.maxHold.Milliseconds(); ms != 0 {
		b = append(b, `,"max_hold_ms":`...)
		b = strconv.AppendInt(b, ms, 10)
	}
	return append(b, '}')
}

func releaseBody(session, token uint64) []byte {
	b := make([]byte, 0, 72)
	b = append(b, `{"session_id":"`...)
	b = strconv.AppendUint(b, session, 10)
	b = append(b, `","fencing_token":"`...)
	b = strconv.AppendUint(b, token, 10)
	return append(b, `"}`...)
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

func lockInfoOf(l lockJSON) lockapi.LockInfo {
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

func leaderInfoOf(l *leaderJSON, election string) lockapi.LeaderInfo {
	if l == nil {
		return lockapi.LeaderInfo{Election: election}
	}
	return lockapi.LeaderInfo{Election: election, Value: l.Value, Token: uint64(l.Token), SessionID: uint64(l.SessionID),
		PartID:      partOf(l.SessionID, l.PartID),
		SessionName: l.Name, ElectedAt: parseTime(l.ElectedAt)}
}
