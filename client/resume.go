package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/lockapi"
)

// ResumeToken lets a restarted process take its remote session back (see
// Client.ResumeSession): the session's ID, its secret (the API's
// session_secret) and its TTL. It is the session's credential: whoever has
// it acts as the session's holder, with every lock it holds. Keep it as you
// would keep a secret (a file only the process may read, a secret store),
// never in a log or an error message; this package writes it nowhere.
// Persist it with String or MarshalText, read it back with
// ParseResumeToken or UnmarshalText. The zero value resumes nothing.
//
// A token is checked by the group when used, never trusted: one whose
// secret was changed resumes nothing, and one whose TTL was changed is
// refused (ErrInvalidResumeToken).
type ResumeToken struct {
	id     uint64
	secret string
	ttl    time.Duration
}

// resumePrefix starts a token's text, and names its version:
// flh1.ID.TTL.SECRET, the ID in hex, the TTL in decimal milliseconds, the
// secret as the API sent it, last, so that any printable secret fits. (An
// embedded session's fencelock.ResumeToken is "flr1." or "flr2.".)
const resumePrefix = "flh1"

// maxSecretLen bounds a token's secret: the API's are 43 bytes (256 bits,
// base64url).
const maxSecretLen = 256

// Resume returns the token that resumes this session after its process
// restarts (Client.ResumeSession): it never changes, and is valid as long
// as the session lives at the group. Keep it as a secret.
//
// The session must be left running at the group for a resume to find it:
// Close, and the Client's Close, end it there.
func (s *Session) Resume() ResumeToken { return ResumeToken{id: s.id, secret: s.secret, ttl: s.ttl} }

// SessionID returns the ID of the session the token resumes.
func (t ResumeToken) SessionID() uint64 { return t.id }

// TTL returns the session's time to live, as the token states it.
func (t ResumeToken) TTL() time.Duration { return t.ttl }

// String encodes the token in printable ASCII, for ParseResumeToken. It
// holds the session's secret.
func (t ResumeToken) String() string {
	return fmt.Sprintf("%s.%x.%d.%s", resumePrefix, t.id, t.ttl.Milliseconds(), t.secret)
}

// MarshalText implements encoding.TextMarshaler, as String.
func (t ResumeToken) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler, as ParseResumeToken.
func (t *ResumeToken) UnmarshalText(b []byte) error {
	p, err := ParseResumeToken(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// ParseResumeToken reads a token String wrote; anything else fails with an
// error wrapping fencelock.ErrInvalidResumeToken, which never quotes the
// input (it may hold a secret).
func ParseResumeToken(s string) (ResumeToken, error) {
	bad := func(why string) (ResumeToken, error) {
		return ResumeToken{}, fmt.Errorf("%w: %s", lockapi.ErrInvalidResumeToken, why)
	}
	f := strings.SplitN(s, ".", 4)
	if len(f) != 4 || f[0] != resumePrefix {
		return bad("not a client resume token (" + resumePrefix + ".…)")
	}
	id, err := strconv.ParseUint(f[1], 16, 64)
	if err != nil || id == 0 {
		return bad("malformed session ID")
	}
	ms, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil || ms < uint64(minTTL.Milliseconds()) || ms > uint64(maxTTL.Milliseconds()) {
		return bad(fmt.Sprintf("malformed TTL: want milliseconds in [%d, %d]", minTTL.Milliseconds(), maxTTL.Milliseconds()))
	}
	secret := f[3]
	if secret == "" || len(secret) > maxSecretLen {
		return bad(fmt.Sprintf("malformed secret: want 1 to %d bytes", maxSecretLen))
	}
	for i := 0; i < len(secret); i++ {
		// It is sent as a header's value: printable ASCII only.
		if secret[i] <= ' ' || secret[i] > '~' {
			return bad("malformed secret: not printable ASCII")
		}
	}
	return ResumeToken{id: id, secret: secret, ttl: time.Duration(ms) * time.Millisecond}, nil
}

// ResumeSession takes back the session t names, after this process (or
// another holding t) restarted within the session's TTL: the session is
// adopted by whichever replica answers, with every lock and leadership it
// holds, their tokens unchanged, and its queued requests in their places
// (docs/http.md, "Any replica serves any session"). It sends one heartbeat
// with t's secret, through the client's usual failover, and on its answer
// returns a Session whose heartbeats go on as a new one's: its holder's
// deadline is that answer's lease after the heartbeat's send (see Session).
//
// The returned Session has no Lock or Leadership yet: re-issue Acquire (or
// AcquireShared, AcquireSemaphore in the mode it was granted: another mode
// fails with ErrPermitConflict) for a lock the session held, and Campaign
// for an election it led; the API answers with that grant and its token
// (checked by a linearizable read), never a second one. A request the old
// process had queued stays queued: re-issue it to wait in its place (its
// context's end withdraws it, as for any Acquire); one nobody re-issues is
// granted to the session in its turn and held until the session ends. The
// API lists a session's grants only by reading every lock of every group
// (GET /v1/locks), so there is no Locks method: the process names what it
// held, as it names what it acquires.
//
// It fails with fencelock.ErrSessionExpired, and tells nothing more, if the
// session is over at the group (expired, closed, ended by an operator) or
// t's secret is not the session's (404 or 403; a bearer token without the
// sessions right is a 403 too, and refused alike); with an error wrapping
// fencelock.ErrInvalidResumeToken for the zero token, or if the group's TTL
// for the session is not t's (a token edited or mis-copied: its holder
// would time its lease wrongly; the heartbeat has renewed the session
// then, which keeps its locks until the TTL runs out or a resume with the
// right token); and with an error wrapping fencelock.ErrUnavailable (and
// ctx's error) if no endpoint answered, when the adoption may still have
// applied: try again with the same token before the TTL runs out.
//
// Resume a session only once its old process is gone: until then both
// hold the same grants with the same tokens, and no fencer can tell them
// apart.
func (c *Client) ResumeSession(ctx context.Context, t ResumeToken) (*Session, error) {
	if t.id == 0 || t.secret == "" {
		return nil, fmt.Errorf("%w: the zero token", lockapi.ErrInvalidResumeToken)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: the client was closed", lockapi.ErrClosed)
	}
	// The heartbeat adopts the session (a replica given its secret
	// resumes it at the group) and renews it; the lease counts from its
	// send, as every heartbeat's does.
	sent := now()
	var a sessionAnswer
	err := c.call(ctx, callSpec{method: "POST", path: "/v1/sessions/" + strconv.FormatUint(t.id, 10) + "/heartbeat",
		secret: t.secret, session: true}, &a)
	var e *Error
	if errors.As(err, &e) && (e.Status == 404 || e.Status == 403) {
		// Over, never was, or not this secret's: the API tells them
		// apart only to the session's holder, and so does this.
		return nil, fmt.Errorf("%w: the group refused to resume session %d: it is over, or the token is not its own",
			lockapi.ErrSessionExpired, t.id)
	}
	if err != nil {
		return nil, err
	}
	if a.TimeoutMS <= 0 || a.LeaseMS > a.TimeoutMS {
		return nil, &badAnswerError{endpoint: "resume", err: fmt.Errorf("heartbeat answer without a sane TTL or lease: timeout_ms %d, lease_ms %d",
			a.TimeoutMS, a.LeaseMS)}
	}
	if ttl := time.Duration(a.TimeoutMS) * time.Millisecond; ttl != t.ttl {
		return nil, fmt.Errorf("%w: the token's TTL is %v, the session's %v", lockapi.ErrInvalidResumeToken, t.ttl, ttl)
	}
	if a.LeaseMS <= 0 {
		return nil, fmt.Errorf("%w: the resume's heartbeat was answered without a lease (groups not renewed: %v): try again",
			lockapi.ErrUnavailable, notRenewed(a.Leases))
	}
	return c.start(t.id, t.secret, t.ttl, time.Duration(a.LeaseMS)*time.Millisecond, sent)
}
