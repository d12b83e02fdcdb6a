package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/fencelock/fencelock/httpapi"
)

// client calls one replica's HTTP API.
type client struct {
	base  string
	token string
	hc    *http.Client
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
	fs.StringVar(&f.url, "http", def, "the replica's API base URL (env FENCELOCK_HTTP)")
	fs.StringVar(&f.tokenFile, "token-file", os.Getenv("FENCELOCK_TOKEN_FILE"), "file whose first line is the bearer token (env FENCELOCK_TOKEN_FILE)")
	fs.StringVar(&f.ca, "cacert", "", "CA file to verify the replica's HTTPS certificate")
	fs.StringVar(&f.cert, "cert", "", "client certificate for HTTPS")
	fs.StringVar(&f.key, "key", "", "key of --cert")
}

func (f *clientFlags) client() (*client, error) {
	u, err := url.Parse(f.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--http %q is not an http:// or https:// URL", f.url)
	}
	c := &client{base: strings.TrimRight(f.url, "/"), hc: &http.Client{}}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		c.token = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}
	if f.ca != "" || f.cert != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.ca != "" {
			pem, err := os.ReadFile(f.ca)
			if err != nil {
				return nil, fmt.Errorf("--cacert: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--cacert %s holds no PEM certificate", f.ca)
			}
		}
		if f.cert != "" {
			cert, err := tls.LoadX509KeyPair(f.cert, f.key)
			if err != nil {
				return nil, fmt.Errorf("--cert: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		c.hc.Transport = &http.Transport{TLSClientConfig: tc}
	}
	return c, nil
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
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
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

// stream opens an event stream; events arrive on the channel, which is
// closed when the stream ends (its error, if any, in *errp).
func (c *client) stream(ctx context.Context, path string) (<-chan sseEvent, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		e := &apiError{status: resp.StatusCode}
		_ = json.Unmarshal(b, &e.body)
		return nil, e
	}
	ch := make(chan sseEvent)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.Kind = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.Data = append(ev.Data, line[len("data: "):]...)
			case line == "" && ev.Kind != "":
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				}
				ev = sseEvent{}
			}
		}
	}()
	return ch, nil
}
