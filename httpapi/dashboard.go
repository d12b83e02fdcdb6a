package httpapi

import (
	_ "embed"
	"net/http"
)

// dashboardHTML is the dashboard: one page, its script inline, no external
// assets, so that it works on a host without Internet access.
//
//go:embed dashboard/index.html
var dashboardHTML []byte

func (s *Server) dashboard(w http.ResponseWriter, r *http.Request) {
	// The page only talks to this replica: no other origin, no framing.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline' 'self'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	writeEmbedded(w, "text/html; charset=utf-8", dashboardHTML)
}

// writeEmbedded answers with body, a file built into the binary, as
// contentType: revalidated on every load, so that a browser never shows
// one of an older binary, and never sniffed as another type.
func writeEmbedded(w http.ResponseWriter, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(body)
}
