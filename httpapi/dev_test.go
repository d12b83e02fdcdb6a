package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/httpapi"
)

// WithLoopbackAdmin (serve --dev) lets a call from this machine use the
// admin right without a token; a call from any other address is refused
// as on any Server without tokens, and a Server with tokens ignores it.
func TestLoopbackAdmin(t *testing.T) {
	g := newGroup(t, false, httpapi.WithLoopbackAdmin())
	end := func(api http.Handler, from string) int {
		// Ending a session without its secret needs the admin right; the
		// session does not exist, so a call with the right gets 404.
		r := httptest.NewRequest("DELETE", "/v1/sessions/12345", nil)
		r.RemoteAddr = from
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		return w.Code
	}
	require.Equal(t, http.StatusNotFound, end(g.API(1), "127.0.0.1:50000"))
	require.Equal(t, http.StatusNotFound, end(g.API(1), "[::1]:50000"))
	require.Equal(t, http.StatusForbidden, end(g.API(1), "10.0.0.7:50000"), "another machine has no admin right")

	acl, err := httpapi.ParseTokens([]byte("reader read:*\n"))
	require.NoError(t, err)
	g.API(2).SetACL(acl)
	require.Equal(t, http.StatusUnauthorized, end(g.API(2), "127.0.0.1:50000"), "with tokens, a token is needed from loopback too")
}
