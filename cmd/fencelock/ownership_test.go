package main

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
)

// newHTTPSession opens a session on base and returns its ID and secret.
func newHTTPSession(t *testing.T, base string, ttlMS int, name string) (id, secret string) {
	t.Helper()
	r := do(t, "POST", base+"/v1/sessions", map[string]any{"ttl_ms": ttlMS, "name": name})
	require.Equal(t, 201, r.Status, r.Raw)
	return r.Str("session_id"), r.Str("session_secret")
}

// adoptWhileFrozen freezes replica 1, where session id lives, until the
// test thaws it (or ends), and heartbeats id on replica 2 until it answers:
// replica 2 adopted the session, and replica 1's copy of it falls behind.
func adoptWhileFrozen(t *testing.T, p *fencelocktest.Processes, id, secret string) {
	t.Helper()
	p.Freeze(1)
	t.Cleanup(func() { p.Thaw(1) }) // again, should the test end before it thaws it: a running replica is left alone
	fencelocktest.WaitFor(t, "the session's heartbeat on replica 2", func() bool {
		r, err := call("POST", []string{p.URLs[2]}, "/v1/sessions/"+id+"/heartbeat", secret, nil)
		return err == nil && r.Status == 200
	})
}

// acquireOn sends session id's acquire of name to base alone.
func acquireOn(base, name, id, secret string, wait bool) (reply, error) {
	return call("POST", []string{base}, "/v1/locks/"+name+"/acquire", secret, map[string]any{"session_id": id, "wait": wait})
}

// TestStaleCopyNeverAnswersGranted is issue 48's second defect, as a
// reviewer reproduced it against real processes: session S holds q through
// replica 1; replica 1 is frozen (SIGSTOP); replica 2 adopts S at a
// heartbeat, S releases q there, and session O acquires q with a higher
// token; replica 1 runs again (SIGCONT). S's acquire re-issued to replica 1
// (one sent while it was frozen, one after) must not be answered "granted"
// from replica 1's stale copy of S while the group shows O holding q: a
// granted answer is backed by the group, never by a local table alone.
func TestStaleCopyNeverAnswersGranted(t *testing.T) {
	// No --http-peers: replica 2 adopts S at once rather than forward to a
	// frozen owner (a forward without an answer deadline is another
	// defect, issue 48's fourth).
	p := fencelocktest.StartServe(t, "--http-peers=")
	const ttl = 15000
	s, sSecret := newHTTPSession(t, p.URLs[1], ttl, "S")
	o, oSecret := newHTTPSession(t, p.URLs[3], ttl, "O")

	r, err := acquireOn(p.URLs[1], "q", s, sSecret, false)
	require.NoError(t, err)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	oldToken := r.Str("fencing_token")

	p.Freeze(1)
	frozenDone := make(chan struct{})
	var frozen reply
	var frozenErr error
	go func() { // sent while replica 1 is frozen: it answers once thawed
		defer close(frozenDone)
		frozen, frozenErr = acquireOn(p.URLs[1], "q", s, sSecret, false)
	}()
	defer func() {
		p.Thaw(1) // again, should the test end before it thaws it: a running replica is left alone
		<-frozenDone
	}()

	// Replica 2 adopts S at its heartbeat, once 2 and 3 have a leader.
	fencelocktest.WaitFor(t, "S's heartbeat on replica 2", func() bool {
		r, err := call("POST", []string{p.URLs[2]}, "/v1/sessions/"+s+"/heartbeat", sSecret, nil)
		return err == nil && r.Status == 200
	})
	r, err = call("POST", []string{p.URLs[2]}, "/v1/locks/q/release", sSecret, map[string]any{"session_id": s, "fencing_token": oldToken})
	require.NoError(t, err)
	require.Equal(t, 200, r.Status, r.Raw)
	r, err = acquireOn(p.URLs[3], "q", o, oSecret, false)
	require.NoError(t, err)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	oToken := r.Str("fencing_token")

	p.Thaw(1)
	<-frozenDone
	require.NoError(t, frozenErr)
	after, err := acquireOn(p.URLs[1], "q", s, sSecret, false)
	require.NoError(t, err)

	// The group shows O holding q with its token throughout.
	info, err := call("GET", []string{p.URLs[2]}, "/v1/locks/q", "", nil)
	require.NoError(t, err)
	require.Equal(t, 200, info.Status, info.Raw)
	require.Equal(t, o, info.Str("holder_session"), "q's holder: %s", info.Raw)
	require.Equal(t, oToken, info.Str("fencing_token"), "q's token: %s", info.Raw)
	for i, a := range []reply{frozen, after} {
		when := [...]string{"sent while replica 1 was frozen", "sent after it ran again"}[i]
		require.NotEqual(t, true, a.Body["granted"], fmt.Sprintf(
			"S's acquire of q %s was answered granted (%d %s) while O holds q with token %s",
			when, a.Status, a.Raw, oToken))
	}
}

// TestSplitAdoptionKeepsTheGrant is issue 48's third defect, as a reviewer
// reproduced it against real processes, in rounds: session S, made on
// replica k, holds a lock in group b (on every replica); replica k is
// killed (SIGKILL); S's client, behind a load balancer, sends a heartbeat
// and an acquire of the lock to each of the two others at once, again and
// again, so both adopt S, over and over (no --http-peers: neither forwards
// to the other). Whichever wins each time, S must keep the lock: every
// acquire answered granted names the one token S was granted, another
// session's acquires are refused while S's lease lasts, every heartbeat
// answered OK promises a lease in group b, and the group shows S holding
// the lock with its token at the end.
func TestSplitAdoptionKeepsTheGrant(t *testing.T) {
	p := fencelocktest.StartServe(t, "--http-peers=", "--group", "b=1,2,3")
	const ttl = 8000
	for round := range 4 {
		k := uint64(round%3 + 1)
		live := []uint64{k%3 + 1, (k+1)%3 + 1}
		name := fmt.Sprintf("x%d@b", round)
		s, sSecret := newHTTPSession(t, p.URLs[k], ttl, fmt.Sprintf("S%d", round))
		o, oSecret := newHTTPSession(t, p.URLs[live[0]], ttl, fmt.Sprintf("O%d", round))
		r, err := acquireOn(p.URLs[k], name, s, sSecret, false)
		require.NoError(t, err)
		require.Equal(t, true, r.Body["granted"], r.Raw)
		token := r.Str("fencing_token")

		p.Kill(k)
		// Well inside the lease of S's grant, and of every heartbeat of S
		// answered OK meanwhile.
		leaseEnd := time.Now().Add(time.Duration(ttl/2) * time.Millisecond)
		for burst := 0; burst == 0 || time.Now().Before(leaseEnd); burst++ {
			var wg sync.WaitGroup
			answers := make([]reply, 5)
			errs := make([]error, 5)
			for i := range answers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					base := p.URLs[live[i%2]]
					switch {
					case i < 2:
						answers[i], errs[i] = call("POST", []string{base}, "/v1/sessions/"+s+"/heartbeat", sSecret, nil)
					case i < 4:
						answers[i], errs[i] = acquireOn(base, name, s, sSecret, false)
					default:
						answers[i], errs[i] = acquireOn(base, name, o, oSecret, false)
					}
				}()
			}
			wg.Wait()
			for i, a := range answers {
				require.NoError(t, errs[i])
				if a.Status != 200 {
					continue // 503: the client asks again
				}
				switch {
				case i < 2:
					leases, _ := a.Body["leases"].(map[string]any)
					require.Contains(t, leases, "b", "round %d, burst %d: S's heartbeat answered OK without a lease in b, where S holds %s: %s",
						round, burst, name, a.Raw)
				case i < 4:
					if a.Body["granted"] == true {
						require.Equal(t, token, a.Str("fencing_token"), "round %d, burst %d: S's acquire answered another token than its grant: %s",
							round, burst, a.Raw)
					}
				default:
					require.NotEqual(t, true, a.Body["granted"], "round %d, burst %d: O was granted %s while S holds it with %s: %s",
						round, burst, name, token, a.Raw)
				}
			}
		}
		info, err := call("GET", []string{p.URLs[live[0]]}, "/v1/locks/"+name, "", nil)
		require.NoError(t, err)
		require.Equal(t, s, info.Str("holder_session"), "round %d: %s's holder: %s", round, name, info.Raw)
		require.Equal(t, token, info.Str("fencing_token"), "round %d: %s's token: %s", round, name, info.Raw)
		p.Restart(k)
	}
}

// TestStaleCopyNeverAnswersNotHeld is the release's side of
// TestStaleCopyNeverAnswersGranted, which the checker's service scenario
// found: session S lives on replica 1; replica 1 is frozen (SIGSTOP);
// replica 2 adopts S at a heartbeat and grants S lock q; replica 1 runs
// again (SIGCONT). S's release of q with that token, sent to replica 1,
// must not be answered "not held" from replica 1's stale copy of S while
// the group shows S holding q: the client would take its lock for gone and
// its live session would keep it forever. Whatever replica 1 answers, the
// group agrees with it afterwards.
func TestStaleCopyNeverAnswersNotHeld(t *testing.T) {
	p := fencelocktest.StartServe(t, "--http-peers=")
	const ttl = 15000
	s, sSecret := newHTTPSession(t, p.URLs[1], ttl, "S")

	adoptWhileFrozen(t, p, s, sSecret)
	r, err := acquireOn(p.URLs[2], "q", s, sSecret, false)
	require.NoError(t, err)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	token := r.Str("fencing_token")

	p.Thaw(1)
	rel, err := call("POST", []string{p.URLs[1]}, "/v1/locks/q/release", sSecret, map[string]any{"session_id": s, "fencing_token": token})
	require.NoError(t, err)
	require.NotEqual(t, 409, rel.Status, "S's release of q (token %s) on the thawed replica 1 was answered %d %s: not held, from its stale copy", token, rel.Status, rel.Raw)

	info, err := call("GET", []string{p.URLs[2]}, "/v1/locks/q", "", nil)
	require.NoError(t, err)
	require.Equal(t, 200, info.Status, info.Raw)
	if rel.Status == 200 {
		require.NotEqual(t, token, info.Str("fencing_token"), "S's release was answered 200 %s, yet the group shows q held with its token: %s", rel.Raw, info.Raw)
	} else {
		require.Equal(t, token, info.Str("fencing_token"), "S's release failed (%d %s), yet q is no longer S's: %s", rel.Status, rel.Raw, info.Raw)
	}
}

// TestStaleCopyNeverAnswersNothingQueued is the withdrawal's side of
// TestStaleCopyNeverAnswersNotHeld: session S lives on replica 1; replica 1
// is frozen; replica 2 adopts S, and S queues for lock q behind session O
// there; replica 1 runs again. S's withdrawal (a release without a token),
// sent to replica 1, must not be answered "nothing queued" from its stale
// copy while the group shows S queued: S would be granted q later and hold
// it unknowing. Whatever replica 1 answers, the group agrees afterwards.
func TestStaleCopyNeverAnswersNothingQueued(t *testing.T) {
	p := fencelocktest.StartServe(t, "--http-peers=")
	const ttl = 15000
	s, sSecret := newHTTPSession(t, p.URLs[1], ttl, "S")
	o, oSecret := newHTTPSession(t, p.URLs[2], ttl, "O")
	r, err := acquireOn(p.URLs[2], "q", o, oSecret, false)
	require.NoError(t, err)
	require.Equal(t, true, r.Body["granted"], r.Raw)

	adoptWhileFrozen(t, p, s, sSecret)
	r, err = acquireOn(p.URLs[2], "q", s, sSecret, true)
	require.NoError(t, err)
	require.Equal(t, 200, r.Status, r.Raw)
	require.EqualValues(t, 1, r.Body["queue_position"], r.Raw)
	inQueue := func() (bool, reply) {
		info, err := call("GET", []string{p.URLs[2]}, "/v1/locks/q", "", nil)
		require.NoError(t, err)
		require.Equal(t, 200, info.Status, info.Raw)
		queue, _ := info.Body["queue"].([]any)
		return slices.Contains(queue, any(s)), info
	}
	queued, info := inQueue()
	require.True(t, queued, "S queued for q, yet the group's queue has no S: %s", info.Raw)

	p.Thaw(1)
	wd, err := call("POST", []string{p.URLs[1]}, "/v1/locks/q/release", sSecret, map[string]any{"session_id": s})
	require.NoError(t, err)
	require.NotEqual(t, 409, wd.Status, "S's withdrawal from q's queue on the thawed replica 1 was answered %d %s: nothing queued, from its stale copy", wd.Status, wd.Raw)

	queued, info = inQueue()
	if wd.Status == 200 {
		require.False(t, queued, "S's withdrawal was answered 200 %s, yet the group shows S in q's queue: %s", wd.Raw, info.Raw)
	} else {
		require.True(t, queued, "S's withdrawal failed (%d %s), yet S is no longer in q's queue: %s", wd.Status, wd.Raw, info.Raw)
	}
}

// TestStaleCopyNeverAnswersNotLeader is TestStaleCopyNeverAnswersNotHeld for
// an election, whose resign shares the release's path (answerGone): session
// S lives on replica 1; replica 1 is frozen; replica 2 adopts S at a
// heartbeat and S is elected leader of e there; replica 1 runs again. S's
// resign of that term, sent to replica 1, must not be answered "not leader"
// from its stale copy while the group shows S leading: S would step down
// while the group still names it, and its next campaign would queue behind
// itself. Whatever replica 1 answers, the group agrees afterwards. (In the
// runs here replica 1's copy had learned the term by the time the resign
// came, and ended it by a command of its own: 200, the term over. The
// withdrawal below reaches the group read every time.)
func TestStaleCopyNeverAnswersNotLeader(t *testing.T) {
	p := fencelocktest.StartServe(t, "--http-peers=")
	const ttl = 15000
	s, sSecret := newHTTPSession(t, p.URLs[1], ttl, "S")

	adoptWhileFrozen(t, p, s, sSecret)
	r, err := call("POST", []string{p.URLs[2]}, "/v1/elections/e/campaign", sSecret, map[string]any{"session_id": s, "value": "s", "wait": false})
	require.NoError(t, err)
	require.Equal(t, true, r.Body["elected"], r.Raw)
	token := r.Str("token")

	p.Thaw(1)
	rs, err := call("POST", []string{p.URLs[1]}, "/v1/elections/e/resign", sSecret, map[string]any{"session_id": s, "token": token})
	require.NoError(t, err)
	require.NotEqual(t, 409, rs.Status, "S's resign of e (token %s) on the thawed replica 1 was answered %d %s: not leader, from its stale copy", token, rs.Status, rs.Raw)

	info, err := call("GET", []string{p.URLs[2]}, "/v1/elections/e", "", nil)
	require.NoError(t, err)
	require.Equal(t, 200, info.Status, info.Raw)
	leader, _ := info.Body["leader"].(map[string]any)
	if rs.Status == 200 {
		require.False(t, leader != nil && leader["token"] == token, "S's resign was answered 200 %s, yet the group shows S leading that term: %s", rs.Raw, info.Raw)
	} else {
		require.True(t, leader != nil && leader["token"] == token, "S's resign failed (%d %s), yet the term is over: %s", rs.Status, rs.Raw, info.Raw)
	}
}

// TestStaleCopyNeverAnswersNoCandidacy is TestStaleCopyNeverAnswersNothingQueued
// for an election: S lives on replica 1; replica 1 is frozen; replica 2
// adopts S, and S queues as a candidate for e behind leader O there;
// replica 1 runs again. S's withdrawal (a resign without a token), sent to
// replica 1, must not be answered "nothing queued" from its stale copy
// while the group shows S a candidate: S would be elected later unknowing.
func TestStaleCopyNeverAnswersNoCandidacy(t *testing.T) {
	p := fencelocktest.StartServe(t, "--http-peers=")
	const ttl = 15000
	s, sSecret := newHTTPSession(t, p.URLs[1], ttl, "S")
	o, oSecret := newHTTPSession(t, p.URLs[2], ttl, "O")
	r, err := call("POST", []string{p.URLs[2]}, "/v1/elections/e/campaign", oSecret, map[string]any{"session_id": o, "value": "o", "wait": false})
	require.NoError(t, err)
	require.Equal(t, true, r.Body["elected"], r.Raw)

	adoptWhileFrozen(t, p, s, sSecret)
	r, err = call("POST", []string{p.URLs[2]}, "/v1/elections/e/campaign", sSecret, map[string]any{"session_id": s, "value": "s", "wait": true})
	require.NoError(t, err)
	require.Equal(t, 200, r.Status, r.Raw)
	require.EqualValues(t, 1, r.Body["queue_position"], r.Raw)
	candidate := func() (bool, reply) {
		info, err := call("GET", []string{p.URLs[2]}, "/v1/elections/e", "", nil)
		require.NoError(t, err)
		require.Equal(t, 200, info.Status, info.Raw)
		cands, _ := info.Body["candidates"].([]any)
		for _, c := range cands {
			if m, _ := c.(map[string]any); m["session_id"] == s {
				return true, info
			}
		}
		return false, info
	}
	queued, info := candidate()
	require.True(t, queued, "S campaigns for e, yet the group's candidates have no S: %s", info.Raw)

	p.Thaw(1)
	wd, err := call("POST", []string{p.URLs[1]}, "/v1/elections/e/resign", sSecret, map[string]any{"session_id": s})
	require.NoError(t, err)
	require.NotEqual(t, 409, wd.Status, "S's withdrawal from e's candidates on the thawed replica 1 was answered %d %s: nothing queued, from its stale copy", wd.Status, wd.Raw)

	queued, info = candidate()
	if wd.Status == 200 {
		require.False(t, queued, "S's withdrawal was answered 200 %s, yet the group shows S a candidate for e: %s", wd.Raw, info.Raw)
	} else {
		require.True(t, queued, "S's withdrawal failed (%d %s), yet S is no longer a candidate for e: %s", wd.Status, wd.Raw, info.Raw)
	}
}
