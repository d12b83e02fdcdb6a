package httpapi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeFlat: the acquire and release bodies read without
// encoding/json (flatAcquire, flatRelease) are read only when decodeJSON,
// the reference, reads them too, and to the same request; every client's
// own form is read that way.
func FuzzDecodeFlat(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{"session_id":"393216","wait":true}`, `{"session_id":"393216","fencing_token":"7"}`,
		` { "session_id" : 1 , "wait" : false } `, `{"session_id":"1","wait":true,"wait":false}`,
		`{"Session_ID":"1"}`, `{"session_id":"1","fencing_token":"01"}`, `{"session_id":01}`,
		`{"session_id":"1","permits":9223372036854775807}`, `{"session_id":"1","max_hold_ms":9223372036854775808}`,
		`{"session_id":"1","wait":true}x`, `{"session_id":"1",}`, `{"session_id":"1" "wait":true}`,
		`{"session_id":"1","wait":truex}`, `{"session_id":"\u0031"}`, `{"session_id":null}`, `{}`, "{\"session_id\":\"1\"}\f",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fa AcquireRequest
		if flatAcquire(b, &fa) {
			var want AcquireRequest
			require.NoError(t, decodeJSON(b, &want, false), "%q", b)
			require.Equal(t, want, fa, "%q", b)
		}
		var fr ReleaseRequest
		if flatRelease(b, &fr) {
			var want ReleaseRequest
			require.NoError(t, decodeJSON(b, &want, false), "%q", b)
			require.Equal(t, want, fr, "%q", b)
		}
	})
}

// What the Go client sends is read by the flat decoders, not handed to
// encoding/json.
func TestClientBodiesAreFlat(t *testing.T) {
	var a AcquireRequest
	require.True(t, flatAcquire([]byte(`{"session_id":"393216","wait":true,"shared":true,"permits":3,"max_hold_ms":5000}`), &a))
	require.Equal(t, AcquireRequest{SessionID: 393216, Wait: true, Shared: true, Permits: 3, MaxHoldMillis: 5000}, a)
	var r ReleaseRequest
	require.True(t, flatRelease([]byte(`{"session_id":"393216","fencing_token":"18446744073709551615"}`), &r))
	require.Equal(t, ReleaseRequest{SessionID: 393216, FencingToken: 1<<64 - 1}, r)
}

// The bodies of a lock's handover are read without encoding/json: the
// reading allocates nothing.
func TestHandoverBodiesDecodeWithoutAllocating(t *testing.T) {
	acquire := []byte(`{"session_id":"393216","wait":true}`)
	release := []byte(`{"session_id":"393216","fencing_token":"7"}`)
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = DecodeAcquire(acquire) }))
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = DecodeRelease(release) }))
}
