package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
)

// call makes one call to the first of urls that answers it at all (a
// stopped replica refuses the connection), as a client with every
// endpoint would; it never fails the test, so that goroutines may use it.
func call(method string, urls []string, path, secret string, body any) (reply, error) {
	var (
		last     error
		answered reply
	)
	for _, base := range urls {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, base+path, rd)
		if err != nil {
			return reply{}, err
		}
		if secret != "" {
			req.Header.Set("Fencelock-Session-Secret", secret)
		}
		resp, err := hc.Do(req)
		if err != nil {
			last = err
			continue
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := reply{Status: resp.StatusCode, Raw: string(raw)}
		_ = json.Unmarshal(raw, &r.Body)
		if r.Status >= 500 { // this replica cannot serve it now: the next one may
			answered = r
			continue
		}
		return r, nil
	}
	if answered.Status != 0 {
		return answered, nil
	}
	return reply{}, last
}

// failoverHeartbeats heartbeats session id every period through whichever
// replica answers, and records the longest time between the sends of two
// heartbeats answered 200: the session's locks are safe while it stays below
// the lease.
type failoverHeartbeats struct {
	mu      sync.Mutex
	last    time.Time
	longest time.Duration
	fails   []string
	quit    chan struct{}
	done    chan struct{}
}

func startFailoverHeartbeats(urls func() []string, id, secret string, period time.Duration) *failoverHeartbeats {
	h := &failoverHeartbeats{last: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			sent := time.Now()
			r, err := call("POST", urls(), "/v1/sessions/"+id+"/heartbeat", secret, nil)
			h.mu.Lock()
			if err == nil && r.Status == 200 {
				h.longest = max(h.longest, sent.Sub(h.last))
				h.last = sent
			} else if len(h.fails) < 20 {
				h.fails = append(h.fails, time.Now().Format("15:04:05.000")+" "+r.Raw+errString(err))
			}
			h.mu.Unlock()
			select {
			case <-h.quit:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (h *failoverHeartbeats) stop() (longest time.Duration, fails []string) {
	close(h.quit)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(h.longest, time.Since(h.last)), h.fails
}

// TestRollingRestartKeepsSessions restarts each of three serve processes in
// turn (SIGTERM, then one SIGKILL) under a client that heartbeats through
// whichever replica answers: its session, made on replica 1, lives on, and
// holds jobs/x with the same fencing token the whole time; another
// session's try-acquire finds it locked at every step, and the holder's
// acquire re-issued on any replica answers the same grant.
func TestRollingRestartKeepsSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts three processes")
	}
	p := fencelocktest.StartServe(t)
	var mu sync.Mutex
	up := map[uint64]bool{1: true, 2: true, 3: true}
	// upURLs lists the running replicas, each step's first choice first:
	// the replica that made the session is tried first while it runs.
	upURLs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for id := uint64(1); id <= 3; id++ {
			if up[id] {
				out = append(out, p.URLs[id])
			}
		}
		return out
	}
	const ttl = 6000
	r := do(t, "POST", p.URLs[1]+"/v1/sessions", map[string]any{"ttl_ms": ttl, "name": "holder"})
	require.Equal(t, 201, r.Status, r.Raw)
	holder, holderSecret := r.Str("session_id"), r.Str("session_secret")
	lease := time.Duration(r.Body["lease_ms"].(float64)) * time.Millisecond
	r = do(t, "POST", p.URLs[3]+"/v1/sessions", map[string]any{"ttl_ms": ttl, "name": "other"})
	require.Equal(t, 201, r.Status, r.Raw)
	other, otherSecret := r.Str("session_id"), r.Str("session_secret")

	hb := startFailoverHeartbeats(upURLs, holder, holderSecret, 500*time.Millisecond)
	hbOther := startFailoverHeartbeats(upURLs, other, otherSecret, 500*time.Millisecond)
	var (
		stopOnce sync.Once
		longest  time.Duration
		fails    []string
	)
	stopHeartbeats := func() {
		stopOnce.Do(func() {
			longest, fails = hb.stop()
			hbOther.stop()
		})
	}
	defer stopHeartbeats()

	r, err := call("POST", []string{p.URLs[2]}, "/v1/locks/jobs%2Fx/acquire", holderSecret, map[string]any{"session_id": holder, "wait": false})
	require.NoError(t, err)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	token := r.Str("fencing_token")
	require.NotEmpty(t, token)

	check := func(step string) {
		t.Helper()
		// Within the lease every check must pass: retry briefly while a
		// replica is still starting or stopping, never past the lease.
		deadline := time.Now().Add(lease)
		var last string
		for {
			ok := func() bool {
				urls := upURLs()
				r, err := call("GET", urls, "/v1/locks/jobs%2Fx", "", nil)
				if err != nil || r.Status != 200 {
					last = "inspect: " + r.Raw + errString(err)
					return false
				}
				require.Equal(t, true, r.Body["held"], "%s: jobs/x not held: %s", step, r.Raw)
				require.Equal(t, holder, r.Str("holder_session"), "%s: jobs/x held by another session: %s", step, r.Raw)
				require.Equal(t, token, r.Str("fencing_token"), "%s: jobs/x's token changed: %s", step, r.Raw)
				r, err = call("POST", urls, "/v1/locks/jobs%2Fx/acquire", otherSecret, map[string]any{"session_id": other, "wait": false})
				if err != nil || r.Status != 200 {
					last = "other's try-acquire: " + r.Raw + errString(err)
					return false
				}
				require.Equal(t, false, r.Body["granted"], "%s: the other session was granted jobs/x: %s", step, r.Raw)
				r, err = call("POST", urls, "/v1/locks/jobs%2Fx/acquire", holderSecret, map[string]any{"session_id": holder, "wait": true})
				if err != nil || r.Status != 200 {
					last = "holder's re-issued acquire: " + r.Raw + errString(err)
					return false
				}
				require.Equal(t, true, r.Body["granted"], "%s: the holder's re-issued acquire: %s", step, r.Raw)
				require.Equal(t, token, r.Str("fencing_token"), "%s: the holder's re-issued acquire: %s", step, r.Raw)
				return true
			}()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s", step, last)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	check("start")
	stop := func(id uint64, sig syscall.Signal) {
		mu.Lock()
		up[id] = false
		mu.Unlock()
		p.Stop(id, sig)
	}
	restart := func(id uint64) {
		p.Restart(id)
		mu.Lock()
		up[id] = true
		mu.Unlock()
	}
	for _, id := range []uint64{1, 2, 3} {
		stop(id, syscall.SIGTERM)
		check("replica " + p.URLs[id] + " stopped (SIGTERM)")
		restart(id)
		check("replica " + p.URLs[id] + " restarted")
	}
	stop(1, syscall.SIGKILL)
	check("replica 1 killed (SIGKILL)")
	restart(1)
	check("replica 1 restarted after SIGKILL")

	stopHeartbeats()
	require.Less(t, longest, lease, "the holder's heartbeats stalled past its lease; failures: %v", fails)
	r, err = call("POST", upURLs(), "/v1/locks/jobs%2Fx/release", holderSecret, map[string]any{"session_id": holder, "fencing_token": token})
	require.NoError(t, err)
	require.Equal(t, 200, r.Status, r.Raw)
}
