package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// pingEvery is how often an idle stream sends a comment, so that proxies and
// clients with read timeouts keep it open.
const pingEvery = 15 * time.Second

// stream is one Server-Sent Events response.
type stream struct {
	ctx     context.Context
	stop    context.CancelFunc
	w       http.ResponseWriter
	rc      *http.ResponseController
	seq     int
	ping    *time.Ticker
	timeout time.Duration // for one write
}

// startStream begins an event stream; it ends when the client goes, when
// the client does not take an event within the write timeout, or when the
// Server closes. Beyond the Server's bound on open streams it answers 429
// (ok false: the response was written).
func (s *Server) startStream(w http.ResponseWriter, r *http.Request) (*stream, bool) {
	if n := s.streams.Add(1); s.maxStreams > 0 && n > int64(s.maxStreams) {
		s.streams.Add(-1)
		writeError(w, newError(http.StatusTooManyRequests, CodeTooManyStreams,
			"this replica has "+strconv.Itoa(s.maxStreams)+" streams open, its bound: close one, or use another replica"))
		return nil, false
	}
	ctx, cancel := context.WithCancel(r.Context())
	stopAfter := context.AfterFunc(s.ctx, cancel)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	st := &stream{ctx: ctx, w: w, rc: http.NewResponseController(w), ping: time.NewTicker(pingEvery), timeout: s.streamWrite}
	var once sync.Once
	st.stop = func() {
		once.Do(func() {
			stopAfter()
			cancel()
			st.ping.Stop()
			// The connection may serve another request: no deadline of
			// this stream's may outlive it.
			_ = st.rc.SetWriteDeadline(time.Time{})
			s.streams.Add(-1)
		})
	}
	if !st.write(func() error { return nil }) {
		return nil, false
	}
	return st, true
}

// write writes with the stream's write deadline and flushes; a client that
// does not take it in time, or a failed write, ends the stream (false).
// Events are never queued for a slow client: the library's channels keep
// only the latest state, and the connection's buffers are all there is.
func (st *stream) write(f func() error) bool {
	if st.timeout > 0 {
		_ = st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
	}
	if err := f(); err != nil || st.rc.Flush() != nil {
		st.stop()
		return false
	}
	return true
}

// send writes one event; a failed write ends the stream.
func (st *stream) send(event string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		b = []byte(`{}`)
	}
	st.seq++
	st.write(func() error {
		_, err := fmt.Fprintf(st.w, "id: %d\nevent: %s\ndata: %s\n\n", st.seq, event, b)
		return err
	})
}

// follow answers a stream of one name's updates (a lock's watch, an
// election's observe): it checks the name, starts the stream, and hands
// each update open sends to each, in order, until the client leaves or the
// updates end; an update with an error (errOf) ends the stream with an
// "error" event.
func follow[T any](s *Server, w http.ResponseWriter, r *http.Request, open func(context.Context, string) <-chan T,
	errOf func(T) error, each func(st *stream, name string, v T)) {
	name, ok := pathName(w, r)
	if !ok {
		return
	}
	st, ok := s.startStream(w, r)
	if !ok {
		return
	}
	defer st.stop()
	ch := open(st.ctx, name)
	for {
		v, ok := recv(st, ch)
		if !ok {
			return
		}
		if err := errOf(v); err != nil {
			st.send("error", Error{Message: err.Error(), Code: classify(err).code})
			return
		}
		each(st, name, v)
	}
}

// recv waits for the next value of ch, pinging the client meanwhile; ok is
// false when the stream or ch ended.
func recv[T any](st *stream, ch <-chan T) (v T, ok bool) {
	for {
		select {
		case v, ok = <-ch:
			return v, ok && st.ctx.Err() == nil
		case <-st.ping.C:
			st.write(func() error { _, err := fmt.Fprint(st.w, ": ping\n\n"); return err })
		case <-st.ctx.Done():
			return v, false
		}
	}
}
