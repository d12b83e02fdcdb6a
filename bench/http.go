package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/bench/lockbench"
	"github.com/fencelock/fencelock/httpapi"
)

// The "http" system: the same replicas, driven through the HTTP API
// (httpapi) over loopback instead of in-process calls, so that its figures
// against the in-process ones are the API's overhead: JSON, HTTP, a session
// renewed by its client's heartbeats, and the grant of a queued acquire
// delivered on a watch stream.

type httpCluster struct {
	*cluster
	apis    []*httpapi.Server
	servers []*http.Server
	urls    []string
	hc      *http.Client
}

func httpStarter(size int) lockbench.Starter {
	return func(ctx context.Context, dir string) (lockbench.Cluster, error) {
		c, err := startCluster(ctx, dir, size, nil)
		if err != nil {
			return nil, err
		}
		hc := &httpCluster{cluster: c, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
		var lns []net.Listener
		peers := map[uint64]string{}
		for i := range size {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				hc.Close()
				return nil, err
			}
			lns = append(lns, ln)
			hc.urls = append(hc.urls, "http://"+ln.Addr().String())
			peers[uint64(i+1)] = hc.urls[i]
		}
		for i := range size {
			api := httpapi.New(c.node(i), httpapi.WithPeers(peers), httpapi.WithLogger(quiet))
			srv := &http.Server{Handler: api}
			go srv.Serve(lns[i])
			hc.apis, hc.servers = append(hc.apis, api), append(hc.servers, srv)
		}
		return hc, nil
	}
}

func (c *httpCluster) Stop(i int) error {
	c.apis[i].Close()
	c.servers[i].Close()
	return c.cluster.Stop(i)
}

func (c *httpCluster) Close() error {
	for i := range c.apis {
		c.apis[i].Close()
		c.servers[i].Close()
	}
	return c.cluster.Close()
}

func (c *httpCluster) NewClient(ctx context.Context, i int, ttl time.Duration) (lockbench.Client, error) {
	return newHTTPClient(ctx, c.hc, c.urls[i], ttl)
}

// newHTTPClient opens a session with ttl at the API at base and keeps it
// alive, a heartbeat every ttl/3.
func newHTTPClient(ctx context.Context, hc *http.Client, base string, ttl time.Duration) (*httpClient, error) {
	cl := &httpClient{hc: hc, base: base, stop: make(chan struct{}), stopped: make(chan struct{})}
	var r httpapi.SessionResponse
	if err := cl.post(ctx, "/v1/sessions", httpapi.CreateSessionRequest{TTLMillis: ttl.Milliseconds()}, &r); err != nil {
		return nil, err
	}
	cl.id, cl.secret, cl.last = r.SessionID, r.SessionSecret, time.Now()
	go cl.heartbeat(ttl / 3)
	return cl, nil
}

type httpClient struct {
	hc            *http.Client
	base          string
	id            httpapi.ID
	secret        string // the session's: every call acting on it sends it
	stop, stopped chan struct{}
	once          sync.Once

	mu   sync.Mutex
	last time.Time // send time of the last heartbeat answered
}

func (c *httpClient) post(ctx context.Context, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+path, body)
	if err != nil {
		return err
	}
	return c.do(req, out)
}

func (c *httpClient) do(req *http.Request, out any) error {
	if c.secret != "" {
		req.Header.Set(httpapi.SecretHeader, c.secret)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (c *httpClient) heartbeat(period time.Duration) {
	defer close(c.stopped)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), period)
		if c.post(ctx, "/v1/sessions/"+c.id.String()+"/heartbeat", nil, nil) == nil {
			c.mu.Lock()
			c.last = sent
			c.mu.Unlock()
		}
		cancel()
	}
}

func (c *httpClient) Acquire(ctx context.Context, name string) (lockbench.Held, error) {
	path := "/v1/locks/" + url.PathEscape(name)
	req := httpapi.AcquireRequest{SessionID: c.id, Wait: true}
	var r httpapi.AcquireResponse
	if err := c.post(ctx, path+"/acquire", req, &r); err != nil {
		return nil, err
	}
	if !r.Granted {
		// Queued at the group: the grant shows on the watch stream, whose
		// first event is the current state (a grant already made).
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wreq, err := http.NewRequestWithContext(wctx, "GET", c.base+path+"/watch", nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.hc.Do(wreq)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for !r.Granted && sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev httpapi.LockEvent
			if json.Unmarshal([]byte(data), &ev) == nil && ev.Held && ev.HolderSession == c.id {
				if err := c.post(ctx, path+"/acquire", req, &r); err != nil {
					return nil, err
				}
			}
		}
		if !r.Granted {
			return nil, errors.Join(errors.New("watch ended before the grant"), ctx.Err())
		}
	}
	return httpHeld{c: c, path: path, token: r.FencingToken}, nil
}

func (c *httpClient) StopHeartbeats(context.Context) (func() time.Time, error) {
	c.once.Do(func() { close(c.stop) })
	<-c.stopped
	return func() time.Time {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.last
	}, nil
}

func (c *httpClient) Close(ctx context.Context) error {
	c.once.Do(func() { close(c.stop) })
	<-c.stopped
	req, err := http.NewRequestWithContext(ctx, "DELETE", c.base+"/v1/sessions/"+c.id.String(), nil)
	if err != nil {
		return err
	}
	err = c.do(req, nil)
	if err != nil && strings.Contains(err.Error(), ": 404 ") {
		return nil // already over (W5 lets it expire)
	}
	return err
}

type httpHeld struct {
	c     *httpClient
	path  string
	token httpapi.ID
}

func (h httpHeld) Token() uint64 { return uint64(h.token) }
func (h httpHeld) Release(ctx context.Context) error {
	return h.c.post(ctx, h.path+"/release", httpapi.ReleaseRequest{SessionID: h.c.id, FencingToken: h.token}, nil)
}
