// Package client is fencelock for a process that is no replica: it speaks
// the HTTP API of `fencelock serve` (docs/http.md) and offers the embedded
// library's own API, so that one program runs on either.
//
//	c, err := client.New(ctx, client.Config{Endpoints: []string{"http://10.0.0.1:7080", "http://10.0.0.2:7080"}})
//	s, err := c.NewSession(ctx, fencelock.WithTTL(10*time.Second))
//	l, err := s.Acquire(ctx, "jobs/report")
//	... write with l.Fence(), stop when <-l.Done() ...
//	err = l.Release(ctx)
//
// A Session's methods have the names and meanings of *fencelock.Session's,
// its Lock and Leadership those of *fencelock.Lock and *fencelock.Leadership,
// and its errors are the sentinels of package lockapi, which the root
// package re-exports (errors.Is(err, fencelock.ErrLocked) and
// errors.Is(err, lockapi.ErrLocked) are one test). Both session types
// satisfy lockapi.Locker (fencelock.Locker). The package imports lockapi,
// not the root: a program that uses only this client links no raft,
// storage or cgo (TestClientLinksNoEngine).
//
// # Failover
//
// A Client keeps to the endpoint that last answered and moves on to the
// next when one does not answer (a connection refused, reset or timed out),
// answers 503 (closing, no quorum, cannot reach what the call needs) or 421
// (the session lives elsewhere). A call tries every endpoint within its
// context's deadline: each try gets at most an even share of the time
// left (and AttemptTimeout), so a replica that takes the call and never
// answers (hung, SIGSTOPped) costs one share, not the call; what the
// others leave (failing fast) goes to the endpoints whose share ran out,
// asked once more, so that a slow replica is not taken for a hung one. An
// endpoint whose try ran out of time is tried last from then on, until it
// answers again. Every call it retries on another endpoint
// is one the API makes safe to send twice: an acquire or campaign names its
// session and lock, and the API answers a second one for the same pair
// with the first one's state and never queues twice.
//
// # The lease
//
// A session heartbeats on its own goroutine. Its Done closes, by this
// process's boot clock (CLOCK_BOOTTIME on Linux, which counts a suspend),
// lease_ms after the send of the last heartbeat (or the create) a replica
// answered OK, whatever the network does meanwhile: the replica gives the
// session up only a margin after that, so the holder stops first, as an
// embedded session's holder does. An answer that grants (an acquire, a
// campaign) carries a lease_ms of its own, from the grant's group: Done
// closes at the earlier of the two (see Session.LeaseLeft).
//
// # Resuming after a restart
//
// A process that restarts within its session's TTL takes the session back
// rather than wait a TTL for its locks to be freed: it keeps
// Session.Resume's token (a credential: keep it as a secret), and after the
// restart passes it, read by ParseResumeToken, to Client.ResumeSession.
// The session comes back with its locks and leaderships and their fencing
// tokens; an Acquire (or Campaign) of one it held answers that grant. The
// old process must be gone, and must not have closed the session (Close
// and Client.Close end it at the group). See ExampleClient_ResumeSession.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/lockapi"
)

// Config configures New.
type Config struct {
	// Endpoints are the replicas' API base URLs ("http://host:7080"), in
	// the order to try them. At least one.
	Endpoints []string
	// Token is the bearer token (serve --tokens-file); "" for none.
	Token string
	// TLS configures HTTPS (the CA, a client certificate); nil: Go's
	// defaults.
	TLS *tls.Config
	// AttemptTimeout bounds one endpoint's answer while others remain to be
	// tried, so that a replica that accepts connections but does not answer
	// leaves time for the others. 0: 5s. A call with a deadline (a
	// heartbeat's is half the lease) gives each try at most the time left
	// shared evenly by the endpoints left to try.
	AttemptTimeout time.Duration
}

// SecretHeader is the header that carries a session's secret.
const SecretHeader = "Fencelock-Session-Secret"

// maxAnswer bounds the body of an answer read into memory; a lock's full
// queue is the largest the API sends.
const maxAnswer = 32 << 20

// Client calls the API of a group's replicas. Its methods are safe for
// concurrent use.
type Client struct {
	bases   []string
	token   string
	hc      *http.Client
	tr      *http.Transport
	attempt time.Duration

	ctx    context.Context // ends with Close: every background goroutine's
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	cur      int          // the endpoint to try first: the last that answered
	late     map[int]bool // endpoints whose last try ran out of time: tried last
	closed   bool
	sessions map[*Session]struct{}
	ids      map[uint64]int // replica ID → endpoint index, learnt on a 421
}

// New returns a client of the replicas at cfg.Endpoints, once one of them
// answers (GET /livez), so that a wrong address fails here.
//
// It fails with an error wrapping ErrBadEndpoint for an endpoint that is not
// an http:// or https:// base URL, and with one wrapping
// fencelock.ErrUnavailable (and ctx's error) if no endpoint answered before
// ctx ended.
//
// The client follows no redirect: the API answers none, so an endpoint
// must be the replica's (or a proxy's that passes calls through), and a 3xx
// from anything in between is an error answer.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrBadEndpoint)
	}
	var bases []string
	for _, e := range cfg.Endpoints {
		u, err := url.Parse(strings.TrimSpace(e))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, fmt.Errorf("%w: %q", ErrBadEndpoint, e)
		}
		bases = append(bases, u.Scheme+"://"+u.Host)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.TLS != nil {
		tr.TLSClientConfig = cfg.TLS.Clone()
	}
	c := &Client{bases: bases, token: cfg.Token, tr: tr, hc: &http.Client{Transport: tr},
		attempt: cfg.AttemptTimeout, sessions: map[*Session]struct{}{}, ids: map[uint64]int{}, late: map[int]bool{}}
	if c.attempt <= 0 {
		c.attempt = 5 * time.Second
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if err := c.call(ctx, callSpec{method: "GET", path: "/livez"}, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close ends every session the client opened (each is over for its holder
// at once, Err ErrClosed; the client asks the group to end it, waiting at
// most 2s, after which the group expires it one TTL later), stops their
// heartbeats and the Observe streams, and closes idle connections. Calls
// in flight fail. Closing a closed Client does nothing.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	var ss []*Session
	for s := range c.sessions {
		ss = append(ss, s)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.close(ctx, fmt.Errorf("%w: the client was closed", lockapi.ErrClosed))
		}()
	}
	wg.Wait()
	cancel()
	c.cancel()
	c.wg.Wait()
	c.tr.CloseIdleConnections()
}

// order returns the endpoints' indexes in the order to try them: from the
// last that answered on, round the list, with those whose last try ran
// out of time at the back (a hung replica takes the connection and never
// answers: it must not spend a call's time before the others are asked).
func (c *Client) order() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	order := make([]int, 0, len(c.bases))
	var late []int
	for k := range c.bases {
		i := (c.cur + k) % len(c.bases)
		if c.late[i] {
			late = append(late, i)
		} else {
			order = append(order, i)
		}
	}
	return append(order, late...)
}

// answered makes endpoint i the first to try from now on.
func (c *Client) answered(i int) {
	c.mu.Lock()
	c.cur = i
	delete(c.late, i)
	c.mu.Unlock()
}

// timedOut puts endpoint i at the back of the order until it answers.
func (c *Client) timedOut(i int) {
	c.mu.Lock()
	c.late[i] = true
	c.mu.Unlock()
}

// tryBound bounds one try of a call with tries endpoints left to ask
// (this one among them): attempt, and no more than an even share of the
// time left before ctx's deadline, so that every endpoint is asked in time
// whichever of them hangs.
func tryBound(ctx context.Context, attempt time.Duration, tries int) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		attempt = min(attempt, time.Until(dl)/time.Duration(tries))
	}
	return attempt
}

// callSpec is one call of the API.
type callSpec struct {
	method, path string
	in           any // the JSON body; nil for none
	// body is the JSON body written already (an acquire's or a release's,
	// wire.go), when in is nil.
	body   []byte
	secret string // the session's, for a call acting on one
	// secretHeader, if set, is the session's secretHeader, sent instead
	// of secret: the calls made once or more a grant take it.
	secretHeader []string
	// session: a 404 means the session is over (ErrSessionExpired).
	session bool
	// attempt bounds each endpoint's answer while others remain (and
	// tryBound shares ctx's time left among them); 0: the client's.
	attempt time.Duration
	// unsure, if set, is set to true when an attempt that failed over may
	// have taken effect: the request may have reached a replica whose
	// answer was lost (reset, timed out, 502/503/504), as opposed to a
	// connection that was never made.
	unsure *bool
}

// neverSent reports whether err is a failure to connect: the request never
// reached the endpoint, so it cannot have taken effect there.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// failover reports whether err, from one endpoint, is a reason to ask the
// next: it did not answer, or answered that it cannot serve the call now.
func failover(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		switch e.Status {
		case http.StatusServiceUnavailable, http.StatusMisdirectedRequest, http.StatusBadGateway, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	var bad *badAnswerError
	var reset *resetError
	return !errors.As(err, &bad) && !errors.As(err, &reset) // no answer: refused, reset, timed out
}

// call makes the call on the endpoints in turn, in order's order, each
// within tryBound but the last (which has what is left of ctx), until one
// answers or all were tried, and those that timed out once more with the
// time left (below); out receives a 2xx
// answer's JSON. The error is an *Error for an answer, or wraps
// fencelock.ErrUnavailable (and ctx's error if it ended) when no endpoint
// answered.
func (c *Client) call(ctx context.Context, sp callSpec, out any) error {
	body := sp.body
	if sp.in != nil {
		b, err := json.Marshal(sp.in)
		if err != nil {
			return err
		}
		body = b
	}
	attempt := sp.attempt
	if attempt == 0 {
		attempt = c.attempt
	}
	order := c.order()
	var errs []error
	// Two rounds at most: every endpoint once, each within an even share
	// of the time left; then, if ctx has a deadline and time is left
	// (the others failed fast: refused, 503, 421), the endpoints whose
	// share ran out, again in order, with the time left shared among them,
	// so that a slow endpoint is not mistaken for a hung one.
	for round := 0; round < 2 && len(order) > 0; round++ {
		var late []int
		for k := 0; k < len(order); k++ {
			i := order[k]
			left := len(order) - k
			actx, cancel := ctx, context.CancelFunc(func() {})
			if left > 1 {
				actx, cancel = context.WithTimeout(ctx, tryBound(ctx, attempt, left))
			}
			err := c.once(actx, c.bases[i], sp, body, out)
			timedOut := err != nil && errors.Is(actx.Err(), context.DeadlineExceeded)
			if timedOut {
				c.timedOut(i)
			}
			cancel()
			if err == nil {
				c.answered(i)
				return nil
			}
			if !failover(err) {
				c.answered(i) // it answered: it is up
				return err
			}
			errs = append(errs, fmt.Errorf("%s: %w", c.bases[i], err))
			if sp.unsure != nil && !neverSent(err) {
				*sp.unsure = true
			}
			if ctx.Err() != nil {
				return unavailable(ctx, errs)
			}
			if timedOut {
				late = append(late, i)
			}
			var e *Error
			if errors.As(err, &e) && e.Status == http.StatusMisdirectedRequest && e.Owner != 0 {
				// The session lives on replica Owner: ask its endpoint next.
				if j := c.endpointOf(ctx, e.Owner, tryBound(ctx, attempt, max(left-1, 1))); j >= 0 {
					if at := slices.Index(order[k+1:], j); at >= 0 {
						order = append(order[:k+1], append([]int{j}, slices.Delete(slices.Clone(order[k+1:]), at, at+1)...)...)
					}
				}
			}
		}
		if _, ok := ctx.Deadline(); !ok {
			break // no time left to share: a second round could wait for ever
		}
		order = late
	}
	return unavailable(ctx, errs)
}

// endpointOf returns the index of the endpoint of replica id, -1 if none
// is known. The replicas' IDs are learnt from their GET /v1/status, asked
// the first time a 421 names an owner (and again for an ID not learnt),
// each within attempt.
func (c *Client) endpointOf(ctx context.Context, id uint64, attempt time.Duration) int {
	c.mu.Lock()
	j, ok := c.ids[id]
	c.mu.Unlock()
	if ok {
		return j
	}
	c.askEveryStatus(ctx, attempt, func(i int, _ string, raw json.RawMessage, err error) {
		var st struct {
			ReplicaID uint64 `json:"replica_id"`
		}
		if err == nil && json.Unmarshal(raw, &st) == nil && st.ReplicaID != 0 {
			c.mu.Lock()
			c.ids[st.ReplicaID] = i
			c.mu.Unlock()
		}
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if j, ok := c.ids[id]; ok {
		return j
	}
	return -1
}

// askEveryStatus asks every endpoint for its GET /v1/status at once, each
// within within, neither failing over nor retrying, and returns when all
// are done. It gives each endpoint's answer (or the call's error) to
// answer, with the endpoint's index and base URL, on that endpoint's own
// goroutine.
func (c *Client) askEveryStatus(ctx context.Context, within time.Duration, answer func(i int, base string, raw json.RawMessage, err error)) {
	var wg sync.WaitGroup
	for i, base := range c.bases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, within)
			defer cancel()
			var raw json.RawMessage
			err := c.once(actx, base, callSpec{method: "GET", path: "/v1/status"}, nil, &raw)
			answer(i, base, raw, err)
		}()
	}
	wg.Wait()
}

// unavailable is the error of a call no endpoint answered: it wraps
// fencelock.ErrUnavailable, ctx's error if ctx ended, every endpoint's error
// (so that errors.Is finds fencelock.ErrNoQuorum when a replica said so),
// and keeps their messages.
func unavailable(ctx context.Context, errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	wrapped := []error{lockapi.ErrUnavailable}
	if ctx.Err() != nil {
		wrapped = append(wrapped, ctx.Err())
	}
	wrapped = append(wrapped, errs...)
	return &multiError{msg: "fencelock: no endpoint answered: " + strings.Join(msgs, "; "), errs: wrapped}
}

type multiError struct {
	msg  string
	errs []error
}

func (e *multiError) Error() string   { return e.msg }
func (e *multiError) Unwrap() []error { return e.errs }

// once makes the call on one endpoint.
func (c *Client) once(ctx context.Context, base string, sp callSpec, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, sp.method, base+sp.path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header["Content-Type"] = jsonType
	}
	c.auth(req)
	switch {
	case sp.secretHeader != nil:
		req.Header[SecretHeader] = sp.secretHeader
	case sp.secret != "":
		req.Header[SecretHeader] = []string{sp.secret}
	}
	// The transport itself, not c.hc: the API answers no call with a
	// redirect (a 3xx is an error answer here), and http.Client's
	// redirect machinery copies every request's headers for one.
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		// As http.Client reports it ("Post \"URL\": ..."), which errors
		// show and errors.As looks through.
		return &url.Error{Op: req.Method[:1] + strings.ToLower(req.Method[1:]), URL: req.URL.String(), Err: err}
	}
	defer resp.Body.Close()
	if d, ok := out.(download); ok && resp.StatusCode == http.StatusOK {
		return d.copy(resp)
	}
	b, err := readAnswer(resp)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return decodeError(resp.StatusCode, b, sp.session, base)
	}
	if out == nil {
		return nil
	}
	if err := decodeAnswer(b, out); err != nil {
		return &badAnswerError{endpoint: base, err: err}
	}
	return nil
}

// jsonType is every request body's Content-Type, one slice for all: a
// request's headers are only read once made (http.RoundTripper).
var jsonType = []string{"application/json"}

// readAnswer reads an answer's body, at most maxAnswer bytes: into one
// buffer of its Content-Length when it has one (every answer but a
// stream's), rather than one grown as it comes.
func readAnswer(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= maxAnswer {
		b := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
}

func (c *Client) auth(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// badAnswerError is a 2xx answer this client cannot read: not retried on
// another endpoint (the call may have taken effect), reported as ErrBadAnswer.
type badAnswerError struct {
	endpoint string
	err      error
}

func (e *badAnswerError) Error() string {
	return fmt.Sprintf("fencelock: malformed answer from %s: %v", e.endpoint, e.err)
}
func (e *badAnswerError) Is(target error) bool { return target == ErrBadAnswer }
func (e *badAnswerError) Unwrap() error        { return e.err }
