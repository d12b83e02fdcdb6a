package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// A call that failed for lack of quorum answers 503 with code no_quorum and
// the library's text, which names the voters; other unavailability keeps
// code unavailable.
func TestNoQuorumBody(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code string
	}{
		{fmt.Errorf("%w: %w: group \"orders\" has had no raft leader for 3s: this replica reaches 0 of the other 2 voters", fencelock.ErrUnavailable, fencelock.ErrNoQuorum), CodeNoQuorum},
		{fmt.Errorf("%w: context deadline exceeded", fencelock.ErrUnavailable), CodeUnavailable},
	} {
		rec := httptest.NewRecorder()
		writeError(rec, tc.err)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Equal(t, "1", rec.Header().Get("Retry-After"))
		var body Error
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		require.Equal(t, tc.code, body.Code)
		require.Equal(t, tc.err.Error(), body.Message)
	}
	require.Equal(t, "no_quorum", CodeNoQuorum)
}

// The membership errors map to their own codes: a removed ID is not just
// any refused change, and a removed replica sends the client elsewhere; so
// does a call the group's version gate does not allow yet.
func TestMembershipErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: replica 3", fencelock.ErrIDRemoved), http.StatusConflict, CodeIDRemoved},
		{fmt.Errorf("%w: address a:1 belongs to replica 1", fencelock.ErrMembership), http.StatusConflict, CodeMembership},
		{fmt.Errorf("%w: replica 3 was removed", fencelock.ErrRemoved), http.StatusServiceUnavailable, CodeReplicaRemoved},
		{fmt.Errorf("%w: it waits for replica 3", fencelock.ErrVersionGated), http.StatusConflict, CodeVersionGated},
	} {
		e := classify(tc.err)
		require.Equal(t, tc.status, e.status, tc.err.Error())
		require.Equal(t, tc.code, e.code, tc.err.Error())
	}
}
