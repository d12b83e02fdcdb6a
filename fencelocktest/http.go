package fencelocktest

// This file makes raw calls to the HTTP API (docs/http.md) for tests that
// check its answers to the letter, as the API's own tests and the command's
// do, rather than through the Go client.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/httpapi"
)

// Reply is an answer of the HTTP API as a test reads it.
type Reply struct {
	Status int
	Body   map[string]any // the JSON object answered; nil if it was none
	Raw    string         // the body as sent, for failure messages
}

// Str is the body's string field k; "" if it has none.
func (r Reply) Str(k string) string { s, _ := r.Body[k].(string); return s }

// Call sends method u through c with body (nil for none; a string or a
// []byte as it is; anything else as JSON) and the headers hdr, and returns
// the answer. A call that gets no answer fails the test.
func Call(t testing.TB, c *http.Client, method, u string, body any, hdr map[string]string) Reply {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("fencelocktest: the body of %s %s: %v", method, u, err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatalf("fencelocktest: %s %s: %v", method, u, err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("fencelocktest: %s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := Reply{Status: resp.StatusCode, Raw: string(raw)}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}

// LockURL is the URL of lock name's resource under base (/v1/locks/NAME,
// the name escaped), followed by /action unless action is "".
func LockURL(base, name, action string) string {
	u := base + "/v1/locks/" + url.PathEscape(name)
	if action != "" {
		u += "/" + action
	}
	return u
}

// Secrets keeps each session's secret, as the session's creator would, so
// that a test's calls can carry it (httpapi.SecretHeader) without the test
// passing it along. The zero value is ready; it is safe for concurrent use.
type Secrets struct{ m sync.Map }

// Keep records session id's secret.
func (s *Secrets) Keep(id, secret string) { s.m.Store(id, secret) }

// Of is session id's secret; "" if none was kept.
func (s *Secrets) Of(id string) string {
	v, _ := s.m.Load(id)
	str, _ := v.(string)
	return str
}

// For is the secret of the session a call names, in its body's session_id
// or its /v1/sessions/{id} path; "" for none.
func (s *Secrets) For(u string, body any) string {
	id := ""
	if m, ok := body.(map[string]any); ok {
		id, _ = m["session_id"].(string)
	}
	if _, rest, ok := strings.Cut(u, "/v1/sessions/"); ok {
		id, _, _ = strings.Cut(rest, "/")
	}
	return s.Of(id)
}

// Session creates a session through base (POST /v1/sessions with ttl_ms)
// and keeps its secret; it fails the test unless the answer is a 201 with
// the session's ID and secret. It returns the ID.
func (s *Secrets) Session(t testing.TB, c *http.Client, base string, ttlMS int) string {
	t.Helper()
	r := Call(t, c, "POST", base+"/v1/sessions", map[string]any{"ttl_ms": ttlMS}, nil)
	if r.Status != http.StatusCreated || r.Str("session_id") == "" || r.Str("session_secret") == "" {
		t.Fatalf("fencelocktest: creating a session through %s: %d %s", base, r.Status, r.Raw)
	}
	s.Keep(r.Str("session_id"), r.Str("session_secret"))
	return r.Str("session_id")
}

// Header is the header that carries the secret For finds: nil if it finds
// none.
func (s *Secrets) Header(u string, body any) map[string]string {
	if sec := s.For(u, body); sec != "" {
		return map[string]string{httpapi.SecretHeader: sec}
	}
	return nil
}

// Event is one server-sent event of a stream of the HTTP API (a lock's
// watch, an election's observe): its name, its JSON data, and when it
// arrived.
type Event struct {
	Kind string
	Data map[string]any
	At   time.Time
}

// Events reads the stream at u (a GET) into a channel, event by event,
// until the stream or ctx ends, and then closes it. It fails the test
// unless the stream answers 200.
func Events(t testing.TB, ctx context.Context, u string) <-chan Event {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		t.Fatalf("fencelocktest: GET %s: %v", u, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("fencelocktest: GET %s: %v", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("fencelocktest: GET %s: %d, not a stream", u, resp.StatusCode)
	}
	ch := make(chan Event, 1000)
	go func() {
		defer resp.Body.Close()
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		var e Event
		for sc.Scan() {
			switch l := sc.Text(); {
			case strings.HasPrefix(l, "event: "):
				e.Kind = l[len("event: "):]
			case strings.HasPrefix(l, "data: "):
				_ = json.Unmarshal([]byte(l[len("data: "):]), &e.Data)
			case l == "" && e.Kind != "":
				e.At = time.Now()
				select {
				case ch <- e:
				case <-ctx.Done():
					return
				}
				e = Event{}
			}
		}
	}()
	return ch
}

// NextEvent waits for the next event of ch that satisfies ok, skipping the
// others; it fails the test (what names the event) if ch closes first or
// none comes in 30s.
func NextEvent(t testing.TB, ch <-chan Event, what string, ok func(Event) bool) Event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e, open := <-ch:
			if !open {
				t.Fatalf("stream ended waiting for %s", what)
			}
			if ok(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s event", what)
		}
	}
}
