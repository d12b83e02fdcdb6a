package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// discard is a ResponseWriter that keeps the last body written and makes
// no allocation of its own.
type discard struct {
	h    http.Header
	body []byte
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(b []byte) (int, error) { d.body = append(d.body[:0], b...); return len(b), nil }

// TestAnswersWrittenInOneAllocation: the answers of an acquire and a
// release, every pair's through the service, are written without
// encoding/json: one allocation each, the body (issue 49), and the same
// bytes as encoding/json's (FuzzWriteFlat).
func TestAnswersWrittenInOneAllocation(t *testing.T) {
	lease := int64(5400)
	w := &discard{h: http.Header{}, body: make([]byte, 0, 512)}
	for _, v := range []any{
		AcquireResponse{Granted: true, FencingToken: 393216, Fence: "00000000000000a1:393216", HolderSession: 7, LeaseMS: &lease},
		AcquireResponse{QueuePosition: 3, HolderSession: 7},
		ReleaseResponse{Released: true},
	} {
		allocs := testing.AllocsPerRun(100, func() { writeJSON(w, http.StatusOK, v) })
		require.LessOrEqual(t, allocs, 1.0, "%#v", v)
	}
}

// FuzzWriteFlat: an acquire's or a release's answer written without
// encoding/json is, byte for byte, what encoding/json's Encoder writes,
// or it is left to encoding/json.
func FuzzWriteFlat(f *testing.F) {
	f.Add(true, uint64(393216), "00000000000000a1:393216", 0, uint64(7), true, int64(5400), false, false)
	f.Add(false, uint64(0), "", 3, uint64(7), false, int64(0), true, false)
	f.Add(false, uint64(1), "<&>\u2028\x00\xff\"\\é", -1, uint64(1<<63), true, int64(-1), false, true)
	f.Fuzz(func(t *testing.T, granted bool, token uint64, fence string, pos int, holder uint64, hasLease bool, lease int64, released, withdrawn bool) {
		a := AcquireResponse{Granted: granted, FencingToken: ID(token), Fence: fence, QueuePosition: pos, HolderSession: ID(holder)}
		if hasLease {
			a.LeaseMS = &lease
		}
		for _, v := range []any{a, ReleaseResponse{Released: released, Withdrawn: withdrawn}} {
			var want bytes.Buffer
			require.NoError(t, json.NewEncoder(&want).Encode(v))
			if got, ok := appendFlat(nil, v); ok {
				require.Equal(t, want.String(), string(got), "%#v", v)
			}
			w := &discard{h: http.Header{}}
			writeJSON(w, http.StatusOK, v)
			require.Equal(t, want.String(), string(w.body), "%#v", v)
		}
	})
}
