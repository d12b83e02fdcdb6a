package fencelock

import (
	"context"
	"time"
)

// This file holds what a service built on the library (the httpapi package,
// the fencelock command) needs beyond the in-process API: sessions whose
// liveness is another process's.

// WithExternalKeepAlive makes a session that renews itself only when its
// holder calls KeepAlive: no goroutine of its own sends keep-alives. It is for
// a session that stands for a client in another process (an HTTP client),
// which must look dead to the group when that client is: if KeepAlive is not
// called for TTL − margin, the session ends by this replica's clock (Done
// closes, ErrSessionExpired) and is closed at the group, so its locks pass on
// within one TTL of the last renewal, as a crashed holder's would.
//
// The remote client must stop acting before this replica can give the
// session up: a renewal made for a heartbeat is sent after the client sent
// that heartbeat, so stopping at the heartbeat's send + TTL − 2·margin by the
// client's clock leaves it margin for its clock's rate against this replica's.
func WithExternalKeepAlive() SessionOption {
	return func(o *sessionOptions) { o.external = true }
}

// KeepAlive renews the session at the group now, with one keep-alive, and
// returns once the group applied it: the holder's deadline then lies at least
// TTL − margin after this call began. It fails with ErrSessionExpired (or
// the session's error) if the session is over, and with ctx's error or
// ErrUnavailable if the group could not be reached in time, in which case the
// deadline is unchanged. Any session may call it; a session made with
// WithExternalKeepAlive is renewed only by it.
func (s *Session) KeepAlive(ctx context.Context) error {
	if err := s.Err(); err != nil {
		return err
	}
	if err := s.renew(ctx); err != nil {
		if serr := s.Err(); serr != nil {
			return serr
		}
		return err
	}
	return nil
}

// SafetyMargin returns the session's safety margin (see WithSafetyMargin).
func (s *Session) SafetyMargin() time.Duration { return s.margin }
