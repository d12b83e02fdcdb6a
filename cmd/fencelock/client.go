package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	apiclient "github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/httpapi"
)

// client calls the HTTP API of a group's replicas. It keeps to one replica
// (the last that answered) and fails over to the next in its list when that
// one does not answer: a connection refused or reset, no answer within the
// try's bound, or a 503 or 421 (the replica is closing, has no quorum,
// or cannot reach the session's owner). A try's bound is the attempt's and
// at most an even share of the time the call's context leaves for the
// replicas still to ask, so that a hung replica (it takes the connection
// and never answers) cannot spend the call's time before the others are
// asked; one whose try ran out of time is asked last from then on, until
// it answers. Every call it makes is safe to send twice (a session created
// twice leaves one nobody heartbeats, which the group expires one TTL
// later).
type client struct {
	bases []string
	token string
	hc    *http.Client
	// attempt bounds one replica's answer when there are others to try (0:
	// only the call's context).
	attempt time.Duration

	mu   sync.Mutex
	cur  int          // index in bases of the replica to try first
	late map[int]bool // replicas whose last try ran out of time: asked last (nil: none)
}

// clientFlags are the flags every client command has.
type clientFlags struct {
	url, tokenFile, ca, cert, key string
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	def := os.Getenv("FENCELOCK_HTTP")
	if def == "" {
		def = "http://127.0.0.1:7080"
	}
	fs.StringVar(&f.url, "http", def, "the replicas' API base URLs, comma-separated: calls fail over to the next when one does not answer (env FENCELOCK_HTTP)")
	fs.StringVar(&f.tokenFile, "token-file", os.Getenv("FENCELOCK_TOKEN_FILE"), "file whose first line is the bearer token (env FENCELOCK_TOKEN_FILE)")
	fs.StringVar(&f.ca, "cacert", "", "CA file to verify the replica's HTTPS certificate")
	fs.StringVar(&f.cert, "cert", "", "client certificate for HTTPS")
	fs.StringVar(&f.key, "key", "", "key of --cert")
}

// ErrBadURL: an --http (or FENCELOCK_HTTP) entry is not an http:// or
// https:// base URL.
var ErrBadURL = errors.New("not an http:// or https:// URL")

// parseBases splits a comma-separated list of base URLs.
func parseBases(list string) ([]string, error) {
	var bases []string
	for _, b := range strings.Split(list, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		u, err := url.Parse(b)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--http %q: %w", b, ErrBadURL)
		}
		bases = append(bases, strings.TrimRight(b, "/"))
	}
	if len(bases) == 0 {
		return nil, fmt.Errorf("--http %q: %w", list, ErrBadURL)
	}
	return bases, nil
}

func (f *clientFlags) client() (*client, error) {
	bases, err := parseBases(f.url)
	if err != nil {
		return nil, err
	}
	c := &client{bases: bases, hc: &http.Client{}}
	if len(bases) > 1 {
		// A replica that accepts connections but does not answer (stopped,
		// overloaded) must leave time for the others.
		c.attempt = 5 * time.Second
	}
	token, tc, err := f.credentials()
	if err != nil {
		return nil, err
	}
	c.token = token
	if tc != nil {
		c.hc.Transport = &http.Transport{TLSClientConfig: tc}
	}
	return c, nil
}

// apiClient returns a client of the fencelock client package for the
// flags (--http, --token-file, --cacert, --cert, --key), once one of the
// replicas answers; it fails with ErrBadURL for a bad --http, and with the
// client's error (wrapping fencelock.ErrUnavailable) when no replica
// answered before ctx ended.
func (f *clientFlags) apiClient(ctx context.Context) (*apiclient.Client, error) {
	bases, err := parseBases(f.url)
	if err != nil {
		return nil, err
	}
	token, tc, err := f.credentials()
	if err != nil {
		return nil, err
	}
	return apiclient.New(ctx, apiclient.Config{Endpoints: bases, Token: token, TLS: tc})
}

// credentials reads the bearer token (the first line of --token-file, ""
// without one) and the TLS configuration (nil without --cacert or --cert).
func (f *clientFlags) credentials() (string, *tls.Config, error) {
	var token string
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return "", nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}
	if f.ca == "" && f.cert == "" {
		return token, nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return "", nil, fmt.Errorf("--cacert: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return "", nil, fmt.Errorf("--cacert %s holds no PEM certificate", f.ca)
		}
	}
	if f.cert != "" {
		cert, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return "", nil, fmt.Errorf("--cert: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return token, tc, nil
}

// apiError is an error answer of the API.
type apiError struct {
	status int
	body   httpapi.Error
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (%d %s)", e.body.Message, e.status, e.body.Code)
}

// do calls the API; out receives a 2xx answer's JSON.
func (c *client) do(ctx context.Context, method, path string, in, out any) error {
	return c.doSession(ctx, "", method, path, in, out)
}

// doSession is do for a call acting on a session: with its secret, which
// the API requires of such calls.
func (c *client) doSession(ctx context.Context, secret, method, path string, in, out any) error {
	return c.call(ctx, c.attempt, secret, method, path, in, out)
}

// order returns the replicas' indexes in the order to ask them: from the
// last that answered on, round the list, those whose last try ran out of
// time at the back.
func (c *client) order() []int {
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

// answered makes replica i the first to try from now on.
func (c *client) answered(i int) {
	c.mu.Lock()
	c.cur = i
	delete(c.late, i)
	c.mu.Unlock()
}

// timedOut makes replica i the last to try until it answers.
func (c *client) timedOut(i int) {
	c.mu.Lock()
	if c.late == nil {
		c.late = map[int]bool{}
	}
	c.late[i] = true
	c.mu.Unlock()
}

// tryBound bounds one try with tries replicas left to ask (this one among
// them): attempt, and at most an even share of what ctx's deadline leaves.
func tryBound(ctx context.Context, attempt time.Duration, tries int) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		attempt = min(attempt, time.Until(dl)/time.Duration(tries))
	}
	return attempt
}

// failover reports whether err, from one replica, is a reason to ask
// another: it did not answer, or answered that it cannot serve the call now
// (closing, no quorum, the session's owner unreachable from it, or no route
// to the owner).
func failover(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status == http.StatusServiceUnavailable || ae.status == http.StatusMisdirectedRequest ||
			ae.status == http.StatusBadGateway || ae.status == http.StatusGatewayTimeout
	}
	return true // no answer: refused, reset, timed out
}

// call makes the call on the replicas in turn, in order's order, until one
// answers or all were tried; attempt (if not 0) bounds each replica's
// answer when there is another to try, as tryBound says.
func (c *client) call(ctx context.Context, attempt time.Duration, secret, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = b
	}
	var errs []error
	for k, i := range c.order() {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if left := len(c.bases) - k; attempt > 0 && left > 1 {
			actx, cancel = context.WithTimeout(ctx, tryBound(ctx, attempt, left))
		}
		err := c.once(actx, c.bases[i], secret, method, path, body, out)
		if err != nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
			c.timedOut(i)
		}
		cancel()
		if err == nil {
			c.answered(i)
			return nil
		}
		if ctx.Err() != nil || !failover(err) {
			if len(errs) == 0 {
				return err
			}
			return fmt.Errorf("%w (and before: %w)", err, replicaErrors(errs))
		}
		if len(c.bases) == 1 {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.bases[i], err))
	}
	return fmt.Errorf("no replica answered: %w", replicaErrors(errs))
}

// replicaErrors are the errors of the replicas a call was tried on, each
// naming its replica; errors.Is and errors.As see every one.
type replicaErrors []error

func (e replicaErrors) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (e replicaErrors) Unwrap() []error { return e }

// once makes the call on one replica.
func (c *client) once(ctx context.Context, base, secret, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if secret != "" {
		req.Header.Set(httpapi.SecretHeader, secret)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{status: resp.StatusCode}
		if json.Unmarshal(b, &e.body) != nil || e.body.Code == "" {
			e.body.Message, e.body.Code = strings.TrimSpace(string(b)), "http"
		}
		return e
	}
	if out != nil && len(b) > 0 {
		if raw, ok := out.(*json.RawMessage); ok {
			*raw = append((*raw)[:0], b...)
			return nil
		}
		return json.Unmarshal(b, out)
	}
	return nil
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	Kind string
	Data json.RawMessage
}

// Bounds of a stream: its headers must come within streamOpen (the replica
// starts each stream with a linearizable read), and a stream that carries
// nothing, not even the ping the API sends every 15s, for streamIdle is
// taken for a replica that stopped answering.
var (
	streamOpen = 10 * time.Second
	streamIdle = 40 * time.Second
)

// stream opens an event stream on one replica, failing over as call does;
// events arrive on the channel, which is closed when the stream ends: its
// replica closed it or died, it carried nothing for streamIdle, or ctx
// ended.
func (c *client) stream(ctx context.Context, path string) (<-chan sseEvent, error) {
	var errs []error
	for _, i := range c.order() {
		ch, err := c.streamOnce(ctx, c.bases[i], path)
		if err == nil {
			c.answered(i)
			return ch, nil
		}
		if ctx.Err() != nil || !failover(err) || len(c.bases) == 1 {
			return nil, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.bases[i], err))
	}
	return nil, fmt.Errorf("no replica answered: %w", replicaErrors(errs))
}

func (c *client) streamOnce(ctx context.Context, base, path string) (<-chan sseEvent, error) {
	sctx, cancel := context.WithCancel(ctx)
	// Cancelling the request is the one way to give up on a body that
	// stops arriving: the watchdog does it when nothing came in time.
	watchdog := time.AfterFunc(streamOpen, cancel)
	req, err := http.NewRequestWithContext(sctx, "GET", base+path, nil)
	if err != nil {
		watchdog.Stop()
		cancel()
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		watchdog.Stop()
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		defer cancel()
		watchdog.Stop()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		e := &apiError{status: resp.StatusCode}
		if json.Unmarshal(b, &e.body) != nil || e.body.Code == "" {
			e.body.Message, e.body.Code = strings.TrimSpace(string(b)), "http"
		}
		return nil, e
	}
	watchdog.Reset(streamIdle)
	ch := make(chan sseEvent)
	go func() {
		defer close(ch)
		defer cancel()
		defer watchdog.Stop()
		defer resp.Body.Close()
		scanEvents(resp.Body, func() { watchdog.Reset(streamIdle) }, func(ev sseEvent) bool {
			select {
			case ch <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return ch, nil
}

// scanEvents reads Server-Sent Events from r until it ends, fails, or emit
// returns false; line is called for every line read, pings included. Lines
// over 1 MiB end the stream (the API's largest event is far smaller).
// Events without an event: line are skipped; what is not an event:, data:
// or blank line (a ": ping" comment) is ignored.
func scanEvents(r io.Reader, line func(), emit func(sseEvent) bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var ev sseEvent
	for sc.Scan() {
		line()
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "event: "):
			ev.Kind = l[len("event: "):]
		case strings.HasPrefix(l, "data: "):
			ev.Data = append(ev.Data, l[len("data: "):]...)
		case l == "":
			if ev.Kind != "" && !emit(ev) {
				return
			}
			ev = sseEvent{}
		}
	}
}

// follow keeps a stream open on whichever replica answers, from first (open
// already), until ctx ends: a stream that ends while ctx lives (its replica
// closed or died, or it went silent) is reopened on the next replica that
// answers, and begins with the current state, so nothing but intermediate
// states is missed. The channel closes when ctx ends, or with *errp set when
// a replica refuses the stream for a reason another would share (a token
// without the read right, say).
func (c *client) follow(ctx context.Context, path string, first <-chan sseEvent, errp *error) <-chan sseEvent {
	out := make(chan sseEvent)
	go func() {
		defer close(out)
		ch := first
		backoff := 100 * time.Millisecond
		for {
			for ev := range ch {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			for {
				if ctx.Err() != nil {
					return
				}
				var err error
				if ch, err = c.stream(ctx, path); err == nil {
					backoff = 100 * time.Millisecond
					break
				}
				if ctx.Err() == nil && !failover(err) {
					*errp = err
					return
				}
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
					return
				}
				backoff = min(2*backoff, 2*time.Second)
			}
		}
	}()
	return out
}
