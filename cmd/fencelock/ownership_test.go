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

// staleCopyTarget is a lock or an election, as the stale-copy tests below
// see it: the release of a lock and the resign of a term share one path in
// the service (answerGone), and so do a lock's queue and an election's
// candidates, so each test holds for both.
type staleCopyTarget struct {
	path string // "/v1/locks/q"
	// take acquires the lock or campaigns (with value) for the election.
	take func(base, id, secret, value string, wait bool) (reply, error)
	// drop is the verb, after path, that gives it up: "release".
	drop string
	// won is the key of take's answer when it was granted at once, token
	// the key of the token that answer names.
	won, token string
	// holds says the group's info shows that token holding it, queues that
	// it shows session id queued for it.
	holds  func(info reply, token string) bool
	queues func(info reply, id string) bool
	// The tests' words for it, in their failure messages: "release of q",
	// "not held", "q held with its token", "q is no longer S's"; "S queued
	// for q", "queue", "q's queue", "in q's queue".
	dropOf, notHeld, held, gone    string
	entered, list, queueOf, queued string
}

var (
	staleLock = staleCopyTarget{
		path: "/v1/locks/q",
		take: func(base, id, secret, _ string, wait bool) (reply, error) {
			return acquireOn(base, "q", id, secret, wait)
		},
		drop:  "release",
		won:   "granted",
		token: "fencing_token",
		holds: func(info reply, token string) bool { return info.Str("fencing_token") == token },
		queues: func(info reply, id string) bool {
			queue, _ := info.Body["queue"].([]any)
			return slices.Contains(queue, any(id))
		},
		dropOf: "release of q", notHeld: "not held", held: "q held with its token", gone: "q is no longer S's",
		entered: "S queued for q", list: "queue", queueOf: "q's queue", queued: "in q's queue",
	}
	staleElection = staleCopyTarget{
		path: "/v1/elections/e",
		take: func(base, id, secret, value string, wait bool) (reply, error) {
			return call("POST", []string{base}, "/v1/elections/e/campaign", secret, map[string]any{"session_id": id, "value": value, "wait": wait})
		},
		drop:  "resign",
		won:   "elected",
		token: "token",
		holds: func(info reply, token string) bool {
			leader, _ := info.Body["leader"].(map[string]any)
			return leader != nil && leader["token"] == token
		},
		queues: func(info reply, id string) bool {
			cands, _ := info.Body["candidates"].([]any)
			for _, c := range cands {
				if m, _ := c.(map[string]any); m["session_id"] == id {
					return true
				}
			}
			return false
		},
		dropOf: "resign of e", notHeld: "not leader", held: "S leading that term", gone: "the term is over",
		entered: "S campaigns for e", list: "candidates", queueOf: "e's candidates", queued: "a candidate for e",
	}
)

// TestStaleCopyNeverAnswersNotHeld is the release's side of
// TestStaleCopyNeverAnswersGranted, which the checker's service scenario
// found: session S lives on replica 1; replica 1 is frozen (SIGSTOP);
// replica 2 adopts S at a heartbeat and grants S lock q; replica 1 runs
// again (SIGCONT). S's release of q with that token, sent to replica 1,
// must not be answered "not held" from replica 1's stale copy of S while
// the group shows S holding q: the client would take its lock for gone and
// its live session would keep it forever. Whatever replica 1 answers, the
// group agrees with it afterwards.
func TestStaleCopyNeverAnswersNotHeld(t *testing.T) { staleCopyNeverAnswersGone(t, staleLock) }

// TestStaleCopyNeverAnswersNothingQueued is the withdrawal's side of
// TestStaleCopyNeverAnswersNotHeld: session S lives on replica 1; replica 1
// is frozen; replica 2 adopts S, and S queues for lock q behind session O
// there; replica 1 runs again. S's withdrawal (a release without a token),
// sent to replica 1, must not be answered "nothing queued" from its stale
// copy while the group shows S queued: S would be granted q later and hold
// it unknowing. Whatever replica 1 answers, the group agrees afterwards.
func TestStaleCopyNeverAnswersNothingQueued(t *testing.T) {
	staleCopyNeverAnswersNothingQueued(t, staleLock)
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
// withdrawal below reaches the group read every time, and httpapi's
// TestGrantGoneIsTheGroupsWord reaches the resign's read every time.)
func TestStaleCopyNeverAnswersNotLeader(t *testing.T) { staleCopyNeverAnswersGone(t, staleElection) }

// TestStaleCopyNeverAnswersNoCandidacy is TestStaleCopyNeverAnswersNothingQueued
// for an election: S lives on replica 1; replica 1 is frozen; replica 2
// adopts S, and S queues as a candidate for e behind leader O there;
// replica 1 runs again. S's withdrawal (a resign without a token), sent to
// replica 1, must not be answered "nothing queued" from its stale copy
// while the group shows S a candidate: S would be elected later unknowing.
func TestStaleCopyNeverAnswersNoCandidacy(t *testing.T) {
	staleCopyNeverAnswersNothingQueued(t, staleElection)
}

// staleCopyNeverAnswersGone is TestStaleCopyNeverAnswersNotHeld for x.
func staleCopyNeverAnswersGone(t *testing.T, x staleCopyTarget) {
	p := fencelocktest.StartServe(t, "--http-peers=")
	const ttl = 15000
	s, sSecret := newHTTPSession(t, p.URLs[1], ttl, "S")

	adoptWhileFrozen(t, p, s, sSecret)
	r, err := x.take(p.URLs[2], s, sSecret, "s", false)
	require.NoError(t, err)
	require.Equal(t, true, r.Body[x.won], r.Raw)
	token := r.Str(x.token)

	p.Thaw(1)
	rel, err := call("POST", []string{p.URLs[1]}, x.path+"/"+x.drop, sSecret, map[string]any{"session_id": s, x.token: token})
	require.NoError(t, err)
	require.NotEqual(t, 409, rel.Status, "S's %s (token %s) on the thawed replica 1 was answered %d %s: %s, from its stale copy", x.dropOf, token, rel.Status, rel.Raw, x.notHeld)

	info, err := call("GET", []string{p.URLs[2]}, x.path, "", nil)
	require.NoError(t, err)
	require.Equal(t, 200, info.Status, info.Raw)
	if rel.Status == 200 {
		require.False(t, x.holds(info, token), "S's %s was answered 200 %s, yet the group shows %s: %s", x.drop, rel.Raw, x.held, info.Raw)
	} else {
		require.True(t, x.holds(info, token), "S's %s failed (%d %s), yet %s: %s", x.drop, rel.Status, rel.Raw, x.gone, info.Raw)
	}
}

// staleCopyNeverAnswersNothingQueued is
// TestStaleCopyNeverAnswersNothingQueued for x.
func staleCopyNeverAnswersNothingQueued(t *testing.T, x staleCopyTarget) {
	p := fencelocktest.StartServe(t, "--http-peers=")
	const ttl = 15000
	s, sSecret := newHTTPSession(t, p.URLs[1], ttl, "S")
	o, oSecret := newHTTPSession(t, p.URLs[2], ttl, "O")
	r, err := x.take(p.URLs[2], o, oSecret, "o", false)
	require.NoError(t, err)
	require.Equal(t, true, r.Body[x.won], r.Raw)

	adoptWhileFrozen(t, p, s, sSecret)
	r, err = x.take(p.URLs[2], s, sSecret, "s", true)
	require.NoError(t, err)
	require.Equal(t, 200, r.Status, r.Raw)
	require.EqualValues(t, 1, r.Body["queue_position"], r.Raw)
	inQueue := func() (bool, reply) {
		info, err := call("GET", []string{p.URLs[2]}, x.path, "", nil)
		require.NoError(t, err)
		require.Equal(t, 200, info.Status, info.Raw)
		return x.queues(info, s), info
	}
	queued, info := inQueue()
	require.True(t, queued, "%s, yet the group's %s has no S: %s", x.entered, x.list, info.Raw)

	p.Thaw(1)
	wd, err := call("POST", []string{p.URLs[1]}, x.path+"/"+x.drop, sSecret, map[string]any{"session_id": s})
	require.NoError(t, err)
	require.NotEqual(t, 409, wd.Status, "S's withdrawal from %s on the thawed replica 1 was answered %d %s: nothing queued, from its stale copy", x.queueOf, wd.Status, wd.Raw)

	queued, info = inQueue()
	if wd.Status == 200 {
		require.False(t, queued, "S's withdrawal was answered 200 %s, yet the group shows S %s: %s", wd.Raw, x.queued, info.Raw)
	} else {
		require.True(t, queued, "S's withdrawal failed (%d %s), yet S is no longer %s: %s", wd.Status, wd.Raw, x.queued, info.Raw)
	}
}
