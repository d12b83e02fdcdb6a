package httpapi

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/fencelock/fencelock"
)

// Every decoder either refuses a body with an error the API maps to a 4xx,
// or returns a request that survives a round trip; it never panics.

var seeds = []string{
	``, `{}`, `null`, `[]`, `{"session_id":"1"}`, `{"session_id":1,"wait":true}`,
	`{"session_id":"18446744073709551615","fencing_token":"18446744073709551615"}`,
	`{"session_id":"18446744073709551616"}`, `{"session_id":"-1"}`, `{"session_id":"0x10"}`,
	`{"session_id":"1","wiat":true}`, `{"session_id":"1"} {}`, `{"session_id":"1"`, "\xff",
	`{"ttl_ms":10000}`, `{"ttl_ms":-5}`, `{"ttl_ms":1e30}`, `{"session_id":"2","value":"a","wait":false}`,
	`{"session_id":"2","token":"7","value":"x"}`, `{"session_id":"2","token":"0"}`,
}

func fuzzDecoder[T any](f *testing.F, decode func([]byte) (T, error)) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decode(b)
		if err != nil {
			if st := classify(err).status; st < 400 || st >= 500 {
				t.Fatalf("decode error %v maps to status %d", err, st)
			}
			return
		}
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("marshal %#v: %v", v, err)
		}
		v2, err := decode(j)
		if err != nil {
			t.Fatalf("round trip of %s: %v", j, err)
		}
		if j2, _ := json.Marshal(v2); string(j2) != string(j) {
			t.Fatalf("round trip changed %s to %s", j, j2)
		}
	})
}

func FuzzDecodeCreateSession(f *testing.F) { fuzzDecoder(f, DecodeCreateSession) }
func FuzzDecodeAcquire(f *testing.F)       { fuzzDecoder(f, DecodeAcquire) }
func FuzzDecodeRelease(f *testing.F)       { fuzzDecoder(f, DecodeRelease) }
func FuzzDecodeCampaign(f *testing.F)      { fuzzDecoder(f, DecodeCampaign) }
func FuzzDecodeProclaim(f *testing.F)      { fuzzDecoder(f, DecodeProclaim) }
func FuzzDecodeResign(f *testing.F)        { fuzzDecoder(f, DecodeResign) }

func FuzzValidName(f *testing.F) {
	for _, s := range []string{"", "a", "jobs/reindex", "a\x00b", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if err := validName(name); err != nil && !errors.Is(err, fencelock.ErrInvalidName) {
			t.Fatalf("validName(%q) = %v", name, err)
		}
	})
}

func TestDecodeErrors(t *testing.T) {
	for _, b := range []string{`{"session_id":"1","wiat":true}`, `{"session_id":"1"} {}`, `{`, `{"wait":true}`, `{"session_id":"abc"}`} {
		if _, err := DecodeAcquire([]byte(b)); !errors.Is(err, errBadRequest) {
			t.Errorf("DecodeAcquire(%s) = %v, want a bad request", b, err)
		}
	}
}
