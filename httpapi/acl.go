package httpapi

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidTokensFile is the error of ParseTokens for a file it cannot
// read as `TOKEN [RIGHT:PREFIX ...]` lines; its message names the line.
var ErrInvalidTokensFile = errors.New("httpapi: invalid tokens file")

// Right is what a bearer token may do, on the names its prefixes match.
type Right string

// The rights of a tokens-file line (docs/http.md).
const (
	// RightRead allows the GET views and watch and observe streams of
	// matching names (and, with any prefix, GET /v1/sessions).
	RightRead Right = "read"
	// RightLock allows sessions (create, heartbeat, delete with the
	// secret) and acquire and release of matching lock names.
	RightLock Right = "lock"
	// RightElect allows sessions and campaign, proclaim and resign in
	// matching elections.
	RightElect Right = "elect"
	// RightAdmin allows revoking matching locks and leaderships and, with
	// prefix "*", ending any session without its secret.
	RightAdmin Right = "admin"
)

// AllNames is the prefix that matches every name.
const AllNames = "*"

// grant is one RIGHT:PREFIX of a line.
type grant struct {
	right  Right
	prefix string // AllNames matches every name
}

// principal is one token with its rights.
type principal struct {
	token  []byte
	grants []grant
	line   int
}

// ACL is the parsed tokens file: bearer tokens and what each may do. The
// zero ACL (no tokens) requires no token and allows everything but the
// admin right's calls, which need a token that has it.
type ACL struct {
	principals []principal
}

// Len is the number of tokens.
func (a *ACL) Len() int {
	if a == nil {
		return 0
	}
	return len(a.principals)
}

// allRights is what a line with a token alone, or WithBearerTokens, grants:
// today's files keep meaning "this token may do everything".
var allRights = []grant{{RightRead, AllNames}, {RightLock, AllNames}, {RightElect, AllNames}, {RightAdmin, AllNames}}

// ParseTokens parses a tokens file: one token a line, with the rights it
// has, `TOKEN [RIGHT:PREFIX ...]`, fields separated by spaces or tabs.
// RIGHT is read, lock, elect or admin; PREFIX a name prefix, or * for every
// name. A line with a token alone has every right. Blank lines and lines
// starting with # are skipped. A malformed line, a token given twice, or a
// file with no token is an error wrapping ErrInvalidTokensFile that names
// the line; nothing of such a file is used.
func ParseTokens(data []byte) (*ACL, error) {
	a := &ACL{}
	seen := map[string]int{}
	for i, l := range strings.Split(string(data), "\n") {
		n := i + 1
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		fields := strings.Fields(l)
		tok := fields[0]
		if prev, dup := seen[tok]; dup {
			return nil, fmt.Errorf("%w: line %d: the token of line %d again", ErrInvalidTokensFile, n, prev)
		}
		seen[tok] = n
		p := principal{token: []byte(tok), line: n}
		if len(fields) == 1 {
			p.grants = allRights
		}
		for _, f := range fields[1:] {
			r, prefix, ok := strings.Cut(f, ":")
			if !ok {
				return nil, fmt.Errorf("%w: line %d: %.60q is not RIGHT:PREFIX", ErrInvalidTokensFile, n, f)
			}
			switch Right(r) {
			case RightRead, RightLock, RightElect, RightAdmin:
			default:
				return nil, fmt.Errorf("%w: line %d: unknown right %.40q (want read, lock, elect or admin)", ErrInvalidTokensFile, n, r)
			}
			if prefix == "" {
				return nil, fmt.Errorf("%w: line %d: %s: empty prefix (use * for every name)", ErrInvalidTokensFile, n, r)
			}
			p.grants = append(p.grants, grant{Right(r), prefix})
		}
		a.principals = append(a.principals, p)
	}
	if len(a.principals) == 0 {
		return nil, fmt.Errorf("%w: no token in it", ErrInvalidTokensFile)
	}
	return a, nil
}

// aclFromTokens is the ACL of WithBearerTokens: every token, every right.
func aclFromTokens(tokens []string) *ACL {
	a := &ACL{}
	for _, t := range tokens {
		if t = strings.TrimSpace(t); t != "" {
			a.principals = append(a.principals, principal{token: []byte(t), grants: allRights})
		}
	}
	return a
}

// match returns the principal whose token got is, or nil. Every token is
// compared, in constant time, so that timing reveals neither which token
// nor how much of one matched.
func (a *ACL) match(got string) *principal {
	var found *principal
	for i := range a.principals {
		if subtle.ConstantTimeCompare([]byte(got), a.principals[i].token) == 1 {
			found = &a.principals[i]
		}
	}
	return found
}

// may reports whether p has right on name. A nil p (no tokens file) has
// every right but admin: a server anyone may call lets nobody revoke or end
// another's session, so that a session's secret protects it there too.
func (p *principal) may(right Right, name string) bool {
	if p == nil {
		return right != RightAdmin
	}
	for _, g := range p.grants {
		if g.right == right && (g.prefix == AllNames || strings.HasPrefix(name, g.prefix)) {
			return true
		}
	}
	return false
}

// mayAny reports whether p has right on some name.
func (p *principal) mayAny(right Right) bool {
	if p == nil {
		return right != RightAdmin
	}
	for _, g := range p.grants {
		if g.right == right {
			return true
		}
	}
	return false
}

// mayPrefix reports whether p has right on every name starting with prefix:
// one of its prefixes is a prefix of it (or *).
func (p *principal) mayPrefix(right Right, prefix string) bool {
	// Every name that starts with prefix starts with what prefix starts
	// with: the test is may's on prefix itself.
	return p.may(right, prefix)
}

// errForbidden is a 403 naming the right that was missing.
func errForbidden(msg string) *apiError {
	return newError(403, CodeForbidden, msg)
}

// errNoRight is the 403 of a call p lacks right for; on is what it names.
func errNoRight(p *principal, right Right, on string) *apiError {
	if p == nil {
		return errForbidden("the " + string(right) + " right is needed" + on +
			", and this server has no tokens file: admin calls need a bearer token with the admin right")
	}
	return errForbidden("this token has no " + string(right) + " right" + on)
}
