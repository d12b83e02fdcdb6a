package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/lockapi"
)

var (
	_ lockapi.Locker    = (*Session)(nil)
	_ lockapi.LockGrant = (*Lock)(nil)
	_ lockapi.Term      = (*Leadership)(nil)
)

// Acquire waits until lock name is granted to this session, then returns it
// with its fencing token. The replica queues the request at the group, in
// the lock's FIFO queue; the client asks it for the request's state until
// it is granted, on another endpoint when one stops answering (the API
// answers a repeated acquire of a session and lock with the first one's
// state: it never queues twice).
//
// If ctx ends first, the request is withdrawn (a grant that raced ahead is
// released) and the error wraps ctx.Err(), and ErrUnavailable too if no
// endpoint answered the last ask. If the session ends meanwhile, its error
// is returned. A second Acquire of a name by the same session waits until
// the first one's grant (or call) ends, as a second embedded waiter would.
// Options: fencelock.WithQueuePosition (called on this goroutine, as the
// place changes) and fencelock.WithMaxHold ("max_hold_ms": the Lock's Done
// closes, with ErrMaxHoldExceeded, a safety margin (TTL/5) before the
// group frees the grant). Campaign does not take WithMaxHold: the API
// serves it for locks only (errors.ErrUnsupported).
func (s *Session) Acquire(ctx context.Context, name string, opts ...lockapi.AcquireOption) (*Lock, error) {
	g, err := s.request(ctx, false, name, "", true, lockMode{}, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{g}, nil
}

// TryAcquire takes the lock if it is free, and fails at once with an error
// wrapping ErrLocked if it is held (by this session too); it never queues.
func (s *Session) TryAcquire(ctx context.Context, name string, opts ...lockapi.AcquireOption) (*Lock, error) {
	g, err := s.request(ctx, false, name, "", false, lockMode{}, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{g}, nil
}

// AcquireShared is the embedded Session.AcquireShared: it waits until
// lock name is granted to this session in shared mode ("shared": true in
// the acquire's body). Waiting, failover and cancellation behave as for
// Acquire; a name held or waited for as a semaphore fails with an error
// wrapping ErrPermitConflict, as does a name this session holds or waits
// for in another mode.
func (s *Session) AcquireShared(ctx context.Context, name string, opts ...lockapi.AcquireOption) (*Lock, error) {
	g, err := s.request(ctx, false, name, "", true, lockMode{shared: true}, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{g}, nil
}

// TryAcquireShared takes lock name in shared mode if the holders admit it
// and nobody waits before it, and fails at once with an error wrapping
// ErrLocked otherwise; it never queues.
func (s *Session) TryAcquireShared(ctx context.Context, name string, opts ...lockapi.AcquireOption) (*Lock, error) {
	g, err := s.request(ctx, false, name, "", false, lockMode{shared: true}, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{g}, nil
}

// AcquireSemaphore is the embedded Session.AcquireSemaphore: it waits
// until one of the permits of semaphore name is granted to this session
// ("permits" in the acquire's body). A count outside 1..MaxHoldersPerLock
// fails with ErrInvalidPermits having asked nothing; another count than
// the semaphore's, or a lock's name, with an error wrapping
// ErrPermitConflict.
func (s *Session) AcquireSemaphore(ctx context.Context, name string, permits int, opts ...lockapi.AcquireOption) (*Lock, error) {
	return s.semaphore(ctx, name, permits, true, opts)
}

// TryAcquireSemaphore takes a permit of semaphore name if one is free and
// nobody waits before it, and fails at once with an error wrapping
// ErrLocked otherwise; it never queues.
func (s *Session) TryAcquireSemaphore(ctx context.Context, name string, permits int, opts ...lockapi.AcquireOption) (*Lock, error) {
	return s.semaphore(ctx, name, permits, false, opts)
}

func (s *Session) semaphore(ctx context.Context, name string, permits int, wait bool, opts []lockapi.AcquireOption) (*Lock, error) {
	if permits < 1 || permits > lockapi.MaxHoldersPerLock {
		return nil, fmt.Errorf("%w: %d, allowed 1 to %d", lockapi.ErrInvalidPermits, permits, lockapi.MaxHoldersPerLock)
	}
	g, err := s.request(ctx, false, name, "", wait, lockMode{shared: true, permits: permits}, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{g}, nil
}

// lockMode is an acquire's mode and maximum hold, as its body sends them.
type lockMode struct {
	shared  bool
	permits int
	maxHold time.Duration
}

// Campaign enters the session as a candidate in election with value (at
// most 4096 bytes), and waits until it leads. Waiting, failover,
// cancellation (the candidacy is withdrawn) and the session's end behave as
// for Acquire.
func (s *Session) Campaign(ctx context.Context, election, value string, opts ...lockapi.AcquireOption) (*Leadership, error) {
	g, err := s.request(ctx, true, election, value, true, lockMode{}, opts)
	if err != nil {
		return nil, err
	}
	return &Leadership{g}, nil
}

// TryCampaign makes the session the election's leader if it has none, and
// otherwise fails at once with an error wrapping ErrElectionTaken without
// queuing.
func (s *Session) TryCampaign(ctx context.Context, election, value string, opts ...lockapi.AcquireOption) (*Leadership, error) {
	g, err := s.request(ctx, true, election, value, false, lockMode{}, opts)
	if err != nil {
		return nil, err
	}
	return &Leadership{g}, nil
}

// Lock is Acquire for a fencelock.Locker; on an error the LockGrant is nil.
func (s *Session) Lock(ctx context.Context, name string, opts ...lockapi.AcquireOption) (lockapi.LockGrant, error) {
	l, err := s.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// TryLock is TryAcquire for a fencelock.Locker; on an error the LockGrant
// is nil.
func (s *Session) TryLock(ctx context.Context, name string, opts ...lockapi.AcquireOption) (lockapi.LockGrant, error) {
	l, err := s.TryAcquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Lead is Campaign for a fencelock.Locker; on an error the Term is nil.
func (s *Session) Lead(ctx context.Context, election, value string, opts ...lockapi.AcquireOption) (lockapi.Term, error) {
	l, err := s.Campaign(ctx, election, value, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// TryLead is TryCampaign for a fencelock.Locker; on an error the Term is
// nil.
func (s *Session) TryLead(ctx context.Context, election, value string, opts ...lockapi.AcquireOption) (lockapi.Term, error) {
	l, err := s.TryCampaign(ctx, election, value, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// answerState is an acquire's or a campaign's answer.
type answerState struct {
	granted  bool
	token    uint64
	fence    string
	value    string
	position int
	lease    *int64 // lease_ms with a grant; nil: none given
}

// request runs Acquire, TryAcquire, Campaign and TryCampaign.
func (s *Session) request(ctx context.Context, election bool, name, value string, wait bool, mode lockMode,
	opts []lockapi.AcquireOption) (*grant, error) {
	if err := invalidName(name); err != nil {
		return nil, err
	}
	if election && len(value) > lockapi.MaxValueLen {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", lockapi.ErrValueTooLarge, len(value), lockapi.MaxValueLen)
	}
	set := lockapi.ReadAcquireOptions(opts...)
	if set.MaxHold != 0 && election {
		return nil, fmt.Errorf("%w: WithMaxHold of a campaign through the HTTP API", errors.ErrUnsupported)
	}
	if set.MaxHold < 0 || set.MaxHold > lockapi.MaxHoldLimit || (set.MaxHold > 0 && set.MaxHold < 2*s.margin()) {
		return nil, fmt.Errorf("%w: %v must lie in [%v, %v] (twice the safety margin)", lockapi.ErrInvalidMaxHold,
			set.MaxHold, 2*s.margin(), lockapi.MaxHoldLimit)
	}
	mode.maxHold = set.MaxHold
	key := "lock:" + name
	if election {
		key = "election:" + name
	}
	free, ok, err := s.acquireSlot(ctx, key, !wait)
	if err != nil {
		return nil, err
	}
	if !ok {
		if election {
			return nil, fmt.Errorf("%w: %q is led or campaigned for by this session", lockapi.ErrElectionTaken, clean(name, 64))
		}
		return nil, fmt.Errorf("%w: %q is held or waited for by this session", lockapi.ErrLocked, clean(name, 64))
	}
	g, err := s.ask(ctx, election, name, value, wait, mode, set.QueuePosition, free)
	if err != nil {
		free()
	}
	return g, err
}

// spec is the call that asks for (or about) the request.
func (s *Session) spec(election bool, name, value string, wait bool, mode lockMode) callSpec {
	type campaign struct {
		SessionID wid    `json:"session_id"`
		Value     string `json:"value"`
		Wait      bool   `json:"wait"`
	}
	if election {
		return callSpec{method: "POST", path: electionPath(name, "campaign"), secretHeader: s.secretHeader, session: true,
			in: campaign{wid(s.id), value, wait}}
	}
	return callSpec{method: "POST", path: lockPath(name, "acquire"), secretHeader: s.secretHeader, session: true,
		body: acquireBody(s.id, wait, mode)}
}

// once asks once.
func (s *Session) once(ctx context.Context, election bool, name, value string, wait bool, mode lockMode) (answerState, error) {
	sp := s.spec(election, name, value, wait, mode)
	if election {
		var a campaignAnswer
		err := s.c.call(ctx, sp, &a)
		return answerState{a.Elected, uint64(a.Token), a.Fence, a.Value, a.QueuePosition, a.LeaseMS}, err
	}
	var a acquireAnswer
	err := s.c.call(ctx, sp, &a)
	return answerState{a.Granted, uint64(a.FencingToken), a.Fence, "", a.QueuePosition, a.LeaseMS}, err
}

// ask asks until the request is granted (or refused, for a try), ctx ends
// or the session does.
func (s *Session) ask(ctx context.Context, election bool, name, value string, wait bool, mode lockMode,
	position func(int), free func()) (*grant, error) {
	backoff := pollMin
	last := 0
	// The poll's timer, made by the first ask that is not granted: most
	// calls are granted on their first ask and never wait on it.
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	// since is a time before the group granted the request: the send of
	// the last ask answered without a grant (else of the first); a
	// maximum hold is timed from it.
	since := now()
	for {
		sent := now()
		a, err := s.once(ctx, election, name, value, wait, mode)
		if err == nil && !a.granted {
			since = sent
		}
		switch {
		case err == nil && a.granted:
			f, ferr := fenceOf(a.fence, a.token)
			if ferr != nil {
				// Granted, but unreadable: give it back rather than hold
				// a lock nobody can fence with.
				s.abandon(election, name, mode)
				return nil, &badAnswerError{endpoint: "grant", err: ferr}
			}
			if !election {
				a.value = ""
			} else if a.value == "" {
				a.value = value
			}
			if a.lease != nil {
				// The grant lasts no longer than its group's part of the
				// session, which the last heartbeat may have left out:
				// the deadline comes no later than this call's lease.
				s.grantLease(s.renewShort(ctx, sent, now(), time.Duration(*a.lease)*time.Millisecond))
			}
			g := newGrant(s, name, a.token, f, election, a.value, free)
			if !s.add(g) {
				return nil, g.err
			}
			if mode.maxHold > 0 {
				g.bound(since.Add(mode.maxHold - s.margin()))
			}
			return g, nil
		case err == nil && !wait:
			if election {
				return nil, fmt.Errorf("%w: %q", lockapi.ErrElectionTaken, clean(name, 64))
			}
			return nil, fmt.Errorf("%w: %q", lockapi.ErrLocked, clean(name, 64))
		case err == nil:
			if a.position > 0 && a.position != last {
				last, backoff = a.position, pollMin
				if position != nil {
					position(a.position)
				}
			}
		case errors.Is(err, lockapi.ErrSessionExpired):
			s.end(fmt.Errorf("%w: the session ended at the group: %w", lockapi.ErrSessionExpired, err))
			return nil, err
		case !errors.Is(err, lockapi.ErrUnavailable):
			return nil, err // an answer that will not change: a bad name, no right, a limit
		case ctx.Err() != nil || !wait:
			// Unanswered, and the call is over: the request may stand at
			// the group (the answer was lost), so take it back.
			s.abandon(election, name, mode)
			return nil, err
		}
		// Waiting (or the group unreachable for now): ask again.
		if timer == nil {
			timer = time.NewTimer(backoff)
		} else {
			timer.Reset(backoff)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			s.abandon(election, name, mode)
			return nil, ctx.Err()
		case <-s.done:
			return nil, s.Err()
		}
		backoff = min(2*backoff, pollMax)
	}
}

// abandon takes back what a call that ends without a grant may have left
// at the group: a queued request (withdrawn) or a grant that raced ahead of
// the withdrawal (released). It tries for at most 5s, or the lease's end;
// what it cannot take back ends with the session.
func (s *Session) abandon(election bool, name string, mode lockMode) {
	left := s.left()
	if left <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.c.ctx, min(5*time.Second, left))
	defer cancel()
	type withdraw struct {
		SessionID wid `json:"session_id"`
	}
	path := lockPath(name, "release")
	if election {
		path = electionPath(name, "resign")
	}
	for range 3 {
		err := s.c.call(ctx, callSpec{method: "POST", path: path, secret: s.secret, session: true, in: withdraw{wid(s.id)}}, nil)
		if err == nil || !errors.Is(err, lockapi.ErrNotHeld) {
			return // withdrawn, or it cannot be: the session's end frees it
		}
		// Nothing queued: granted in the meantime, or nothing at all. A
		// try says which; a grant it finds (or makes) is given back.
		a, err := s.once(ctx, election, name, "", false, lockMode{shared: mode.shared, permits: mode.permits})
		if err != nil || !a.granted {
			return
		}
		if election {
			type resign struct {
				SessionID wid `json:"session_id"`
				Token     wid `json:"token"`
			}
			err = s.c.call(ctx, callSpec{method: "POST", path: path, secret: s.secret, session: true, in: resign{wid(s.id), wid(a.token)}}, nil)
		} else {
			type release struct {
				SessionID    wid `json:"session_id"`
				FencingToken wid `json:"fencing_token"`
			}
			err = s.c.call(ctx, callSpec{method: "POST", path: path, secret: s.secret, session: true, in: release{wid(s.id), wid(a.token)}}, nil)
		}
		if err == nil || errors.Is(err, lockapi.ErrNotHeld) || errors.Is(err, lockapi.ErrNotLeader) {
			return
		}
	}
}
