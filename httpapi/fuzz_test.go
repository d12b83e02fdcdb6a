package httpapi

import (
	"encoding/json"
	"errors"
	"strings"
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
	`{"ttl_ms":10000,"name":"reindex@worker-3"}`, `{"name":"a\u0000b"}`, `{"name":"\ud800"}`, `{"name":""}`,
	`{"name":"` + strings.Repeat("n", 257) + `"}`, `{"name":7}`,
	`{"id":4,"addr":"fencelock-3.fencelock:7001","voting":false}`, `{"id":"4","addr":"10.0.0.4:7001","voting":true}`,
	`{"id":0,"addr":"h:1"}`, `{"id":4,"addr":""}`, `{"id":4,"addr":"h:0"}`, `{"id":4,"addr":"[::1]:7001"}`,
	`{"id":4,"addr":"h:1","vote":true}`,
	`{"session_id":"1","wait":true,"shared":true}`, `{"session_id":"1","permits":3}`,
	`{"session_id":"1","shared":true,"permits":2,"max_hold_ms":5000}`, `{"session_id":"1","permits":0}`,
	`{"session_id":"1","permits":-1}`, `{"session_id":"1","permits":1e9}`, `{"session_id":"1","permits":1.5}`,
	`{"session_id":"1","max_hold_ms":-1}`, `{"session_id":"1","max_hold_ms":99999999999999}`,
	`{"session_id":"1","shared":"yes"}`, `{"session_id":"1","maxhold":1}`,
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

func FuzzDecodeRevoke(f *testing.F)    { fuzzDecoder(f, DecodeRevoke) }
func FuzzDecodeAddMember(f *testing.F) { fuzzDecoder(f, DecodeAddMember) }

// A tokens file either parses, into tokens without spaces that have only
// the four rights on non-empty prefixes, or is refused with
// ErrInvalidTokensFile naming the line or saying it holds no token; it
// never panics.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{"", "\n", "# only a comment\n", "tok\n", "a lock:jobs/ read:*\nb\n", "a lock:\n",
		"a lock\n", "a write:x\n", "a\na\n", "a admin:* elect:orders/ read:@billing\n", " \t a \t read:x \r\n", "a lock:a:b\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		acl, err := ParseTokens(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidTokensFile) {
				t.Fatalf("ParseTokens error %v is not ErrInvalidTokensFile", err)
			}
			if !strings.Contains(err.Error(), "line ") && !strings.Contains(err.Error(), "no token") {
				t.Fatalf("ParseTokens error %q names no line", err)
			}
			return
		}
		if acl.Len() == 0 {
			t.Fatal("a parsed file with no token")
		}
		for _, p := range acl.principals {
			if len(p.token) == 0 || strings.ContainsAny(string(p.token), " \t\n") || len(p.grants) == 0 {
				t.Fatalf("principal %+v", p)
			}
			for _, g := range p.grants {
				switch g.right {
				case RightRead, RightLock, RightElect, RightAdmin:
				default:
					t.Fatalf("right %q", g.right)
				}
				if g.prefix == "" {
					t.Fatal("empty prefix")
				}
			}
			if acl.match(string(p.token)) != &acl.principals[slicesIndex(acl.principals, p.line)] {
				t.Fatalf("token of line %d does not match itself", p.line)
			}
		}
	})
}

func slicesIndex(ps []principal, line int) int {
	for i, p := range ps {
		if p.line == line {
			return i
		}
	}
	return -1
}

func TestParseTokens(t *testing.T) {
	acl, err := ParseTokens([]byte("# c\n\nall\njobs lock:jobs/ read:*\n"))
	if err != nil {
		t.Fatal(err)
	}
	all, jobs := acl.match("all"), acl.match("jobs")
	if all == nil || jobs == nil || acl.match("al") != nil || acl.match("") != nil {
		t.Fatal("match")
	}
	for _, r := range []Right{RightRead, RightLock, RightElect, RightAdmin} {
		if !all.may(r, "anything") {
			t.Errorf("a token alone lacks %s", r)
		}
	}
	if !jobs.may(RightLock, "jobs/x") || jobs.may(RightLock, "other/x") || jobs.may(RightLock, "jobs") || jobs.may(RightAdmin, "jobs/x") {
		t.Error("lock:jobs/")
	}
	if !jobs.mayPrefix(RightLock, "jobs/a") || jobs.mayPrefix(RightLock, "") || !jobs.mayPrefix(RightRead, "") {
		t.Error("mayPrefix")
	}
	for in, line := range map[string]string{"a\nb write:x\n": "line 2", "a\n\nb lock\n": "line 3", "x lock:\n": "line 1",
		"a\n#\na read:*\n": "line 3", "# none\n": "no token"} {
		_, err := ParseTokens([]byte(in))
		if !errors.Is(err, ErrInvalidTokensFile) || !strings.Contains(err.Error(), line) {
			t.Errorf("ParseTokens(%q) = %v, want %s", in, err, line)
		}
	}
}
