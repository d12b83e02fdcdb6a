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
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	// The page only talks to this replica: no other origin, no framing.
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline' 'self'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(dashboardHTML)
}
