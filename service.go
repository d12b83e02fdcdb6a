package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/servicehook"
	"github.com/fencelock/fencelock/lockapi"
)

// The HTTP service (package httpapi) reaches the sessions it serves for
// clients through internal/servicehook, so that any replica can serve any
// of them without a public API for it.
func init() {
	servicehook.Register(
		func(f func(group string) uint64) any {
			return SessionOption(func(s *lockapi.SessionSettings) { embedded(s).nonce = f })
		},
		func(ctx context.Context, node any, id uint64, nonce func(group string) uint64, opts []any) (any, error) {
			n, ok := node.(*Node)
			if !ok || n == nil {
				return nil, fmt.Errorf("%w: not a *Node", ErrInvalidConfig)
			}
			so := make([]SessionOption, 0, len(opts))
			for _, o := range opts {
				if f, ok := o.(SessionOption); ok {
					so = append(so, f)
				}
			}
			return n.adoptSession(ctx, id, nonce, so...)
		},
		func(s any) {
			if fs, ok := s.(*Session); ok && fs != nil && fs.s != nil {
				fs.s.Abandon(ErrSessionExpired)
			}
		},
		func(s any, name string, election bool) int {
			fs, ok := s.(*Session)
			if !ok || fs == nil || fs.s == nil {
				return 0
			}
			return fs.s.WithdrawKept(name, election)
		})
	// A grant's answer over HTTP carries a lease bounded by its part's
	// time left: a part its heartbeats could not renew while it held
	// nothing may be near its deadline when a grant is made in it.
	servicehook.RegisterLease(
		func(node any) clock.Instant {
			if n, ok := node.(*Node); ok && n != nil && n.h != nil {
				return n.h.Now()
			}
			return clock.Boot(clock.Real)
		},
		func(grant any, at clock.Instant) time.Duration {
			switch g := grant.(type) {
			case *Lock:
				if g != nil && g.grant != nil {
					return g.grant.PartLeft(at)
				}
			case *Leadership:
				if g != nil && g.grant != nil {
					return g.grant.PartLeft(at)
				}
			}
			return 0
		})
}

// adoptSession takes over session id, opened (anywhere) with nonces derived
// by nonce, with every grant it holds in every group this node runs: see
// servicehook.Adopt. The group's record gives its TTL and name, so the
// caller needs nothing but the session's ID and secret; the resume checks
// the secret. The session keeps its TTL; opts are applied as
// ResumeSession's are.
//
// Like ResumeSession it makes any other copy of the session, in a process
// still running, fail its next command as over (its floor): adopt only a
// session whose holder went on calling this replica.
func (n *Node) adoptSession(ctx context.Context, id uint64, nonce func(group string) uint64, opts ...SessionOption) (*Session, error) {
	if id == 0 || nonce == nil {
		return nil, ErrSessionExpired
	}
	page, err := n.Sessions(ctx, ListAfterSession(id-1), ListLimit(1))
	if err != nil {
		return nil, err
	}
	if len(page.Sessions) == 0 || page.Sessions[0].ID != id {
		return nil, ErrSessionExpired
	}
	info := page.Sessions[0]
	o := sessionOptions{ttl: info.TTL}
	o.apply(opts)
	o.ttl, o.nonce = info.TTL, nonce
	// The parts it opens later carry the name the group stored at the
	// open, as a resumed session's do.
	o.name, o.named = info.Name, true
	if err := o.check(); err != nil {
		if errors.Is(err, ErrInvalidSessionName) { // a session from before names were checked
			o.name = ""
			err = o.check()
		}
		if err != nil {
			return nil, err
		}
	}
	groups := make([]string, 0, len(n.cfg.Groups))
	for _, g := range n.cfg.Groups {
		groups = append(groups, g.Name)
	}
	s := &Session{n: n}
	in, err := n.h.Adopt(ctx, id, groups, o.internal(), s)
	if err != nil {
		return nil, err
	}
	s.s = in
	return s, nil
}
