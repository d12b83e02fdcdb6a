package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// pingEvery is how often an idle stream sends a comment, so that proxies and
// clients with read timeouts keep it open.
const pingEvery = 15 * time.Second

// stream is one Server-Sent Events response.
type stream struct {
	ctx  context.Context
	stop context.CancelFunc
	w    http.ResponseWriter
	rc   *http.ResponseController
	seq  int
	ping *time.Ticker
}

// startStream begins an event stream; it ends when the client goes or the
// Server closes.
func (s *Server) startStream(w http.ResponseWriter, r *http.Request) (*stream, bool) {
	ctx, cancel := context.WithCancel(r.Context())
	stopAfter := context.AfterFunc(s.ctx, cancel)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	st := &stream{ctx: ctx, w: w, rc: http.NewResponseController(w), ping: time.NewTicker(pingEvery)}
	st.stop = func() {
		stopAfter()
		cancel()
		st.ping.Stop()
	}
	if err := st.rc.Flush(); err != nil {
		st.stop()
		return nil, false
	}
	return st, true
}

// send writes one event; a failed write ends the stream.
func (st *stream) send(event string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		b = []byte(`{}`)
	}
	st.seq++
	if _, err := fmt.Fprintf(st.w, "id: %d\nevent: %s\ndata: %s\n\n", st.seq, event, b); err != nil {
		st.stop()
		return
	}
	if st.rc.Flush() != nil {
		st.stop()
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
			if _, err := fmt.Fprint(st.w, ": ping\n\n"); err != nil || st.rc.Flush() != nil {
				st.stop()
			}
		case <-st.ctx.Done():
			return v, false
		}
	}
}
