package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// Do makes an API call that this package has no method for (the admin
// calls of docs/http.md: groups, members) with the failover every call
// has (see the package doc): in, if not nil, is sent as JSON, and out, if
// not nil, receives the 2xx answer's JSON (a *json.RawMessage takes it as
// it came). The call may reach more than one replica, so make with Do only
// calls the API makes safe to send twice.
//
// An error answer is an *Error (errors.Is matches it to its sentinel);
// when no endpoint answered, the error wraps lockapi.ErrUnavailable, ctx's
// error if ctx ended, and each endpoint's.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	return c.call(ctx, callSpec{method: method, path: path, in: in}, out)
}

// Download streams the 200 answer of GET path (a backup, GET
// /v1/snapshot) into the writer reset returns, from the first endpoint
// that answers, failing over as Do does. reset is called when an answer
// begins, so a writer that starts over (a truncated file) holds one whole
// answer: a body cut short (a reset connection, fewer bytes than its
// Content-Length) makes Download ask the next endpoint. No try is bounded
// by AttemptTimeout, as a large body takes its time; ctx bounds the call.
// It fails as Do does, and with reset's error.
func (c *Client) Download(ctx context.Context, path string, reset func() (io.Writer, error)) error {
	return c.call(ctx, callSpec{method: http.MethodGet, path: path, attempt: unbounded}, download{reset: reset})
}

// unbounded is an attempt bound no try reaches: only ctx bounds it (and
// the even share of ctx's time left among the endpoints, if it has a
// deadline).
const unbounded = 1 << 62

// download is the out of a call whose 200 answer is streamed, not decoded.
type download struct{ reset func() (io.Writer, error) }

// copy writes resp's body to a fresh writer.
func (d download) copy(resp *http.Response) error {
	w, err := d.reset()
	if err != nil {
		return &resetError{err: err}
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return err
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return fmt.Errorf("the answer was cut short: %d of %d bytes", n, resp.ContentLength)
	}
	return nil
}

// resetError is a Download's own writer failing: no other endpoint would
// do better.
type resetError struct{ err error }

func (e *resetError) Error() string { return e.err.Error() }
func (e *resetError) Unwrap() error { return e.err }
