package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/proposer"
	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/lockapi"
)

// Propose applies cmd through raft, retrying transient failures (no leader
// yet, leader change, timeout, busy) until ctx ends. Every command is safe to
// retry: the state machine applies each at most once. When ctx ends first the
// error satisfies errors.Is for both ErrUnavailable and ctx.Err().
//
// Until this replica has applied the group's ID, only LeaderStart (whose
// first application sets it) is proposed; every other command waits (see
// awaitGroupID).
//
// A command whose kind needs a newer log version than the group writes
// (its version gate, as applied here) fails at once with an error wrapping
// fsm.ErrVersionGated that names the members the group waits for: nothing
// is proposed.
func (r *Shard) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	if err := r.gated(ctx, &cmd); err != nil {
		return fsm.Result{}, err
	}
	r.preferGate(ctx, cmd)
	res, err := r.propose(ctx, cmd)
	if g := r.host.Replaced(ctx, r, err); g != nil {
		return g.Propose(ctx, cmd) // the shard moved off: through its mirror now
	}
	return res, err
}

// propose is Propose without the gate's check: the leader's raise of the
// gate is the one command allowed beyond it.
func (r *Shard) propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	defer r.Ops.Proposals.Since(time.Now())
	if cmd.Kind != fsm.KindLeaderStart {
		if err := r.awaitGroupID(ctx); err != nil {
			return fsm.Result{}, err
		}
	}
	var last error
	for b := newBackoff(r.cfg.RTT); ; {
		if err := r.check(ctx, last); err != nil {
			return fsm.Result{}, err
		}
		leader := r.leaderKnown()
		res, err := r.prop.Propose(ctx, cmd)
		if err == nil && r.loseReply(cmd.Kind) {
			err = proposer.ErrLeaderChanged // a test's: see TestingLoseReplies
		}
		if err == nil {
			return res, nil
		}
		// An attempt cut short by the caller's end says only that: the
		// attempt before it, if any, says why the group did not answer.
		if last == nil || ctx.Err() == nil {
			last = err
		}
		if !retryable(err) {
			if errors.Is(err, proposer.ErrClosed) {
				return fsm.Result{}, r.ClosedErr()
			}
			if errors.Is(err, fsm.ErrVersionGated) {
				return fsm.Result{}, err
			}
			return fsm.Result{}, fmt.Errorf("%w: %s", lockapi.ErrUnavailable, Describe(err))
		}
		if !errors.Is(err, proposer.ErrLeaderChanged) && !errors.Is(err, dragonboat.ErrTimeout) {
			b.wait(ctx, r.Done(), leader)
		}
	}
}

// Read runs q as a linearizable read, retrying like propose. A read index
// request can be lost silently (a replica that has just started may never
// see its answer), so the first attempts are short, about two election
// timeouts, and the wait doubles from there up to ProposalTimeout.
func (r *Shard) Read(ctx context.Context, q fsm.Query) (any, error) {
	v, err := r.read(ctx, q)
	if g := r.host.Replaced(ctx, r, err); g != nil {
		return g.Read(ctx, q)
	}
	return v, err
}

// read is Read on the shard.
func (r *Shard) read(ctx context.Context, q fsm.Query) (any, error) {
	var last error
	attempt := min(2*time.Duration(r.cfg.ElectionTicks)*r.cfg.RTT, r.cfg.ProposalTimeout)
	for b := newBackoff(r.cfg.RTT); ; attempt = min(2*attempt, r.cfg.ProposalTimeout) {
		if err := r.check(ctx, last); err != nil {
			return nil, err
		}
		leader := r.leaderKnown()
		if !r.calls.enter() {
			return nil, r.stoppedErr()
		}
		actx, cancel := context.WithTimeout(ctx, attempt)
		// Stop waits for the reads in flight (calls.go): its cancel ends
		// this one's wait for the group.
		unhook := context.AfterFunc(r.Context(), cancel)
		v, err := r.nh.SyncRead(actx, r.ShardID(), q)
		unhook()
		cancel()
		r.calls.exit()
		if err == nil {
			return v, nil
		}
		last = err
		// An attempt whose deadline passed before SyncRead looked at it (a
		// starved goroutine) is a timeout like any other.
		if !retryable(err) && !errors.Is(err, dragonboat.ErrTimeoutTooSmall) &&
			!errors.Is(err, dragonboat.ErrInvalidDeadline) {
			return nil, fmt.Errorf("%w: %s", lockapi.ErrUnavailable, Describe(err))
		}
		b.wait(ctx, r.Done(), leader)
	}
}

// check returns the error that ends a retry loop, if any.
//
// A call fails with a no-quorum error (ErrUnavailable and ErrNoQuorum)
// when its group has had no leader for patience() and this replica does
// not reach a quorum of the voters: waiting longer cannot help until an
// operator brings voters back, and the caller is better served by the cause
// now (it may retry, or try another replica) than by its deadline later.
// Failing never grants anything, so this keeps the group CP. Only a call
// with a deadline, or whose context FailFast marked, fails early: one
// without asked to wait for the group (the background work that must
// finish, such as a withdrawal, runs so), and still learns the cause if its
// context ends.
func (r *Shard) check(ctx context.Context, last error) error {
	if err := r.Serving(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		if last == nil {
			return err // over before it began: the group was never asked
		}
		return r.unavailable(err, last)
	}
	if _, ok := ctx.Deadline(); ok || groupcore.IsFailFast(ctx) {
		if q, lost := r.quorumLost(r.Patience()); lost {
			return &noQuorumError{q: q}
		}
	}
	return nil
}

// unavailable is the error of a call whose context ended before the group
// answered: the no-quorum error if that is why (the group has had no leader
// for an election timeout and too few voters are reached), else ctxErr with
// the last attempt's error.
func (r *Shard) unavailable(ctxErr, last error) error {
	if q, lost := r.quorumLost(r.ElectionTimeout()); lost {
		return &noQuorumError{q: q, ctxErr: ctxErr}
	}
	return Unavailable(ctxErr, last)
}

// errNoGroupID is why a proposal held back by awaitGroupID never went.
var errNoGroupID = errors.New("this replica has not applied the group's ID yet: the group's first raft leader has not taken office, or this replica is catching up")

// awaitGroupID holds a proposal back until this replica has applied the
// group's ID, so that the proposal's entry gets a higher index than the ID's
// and every replica applies the ID first: a grant's fence (the ID and the
// token) then never carries group 0, not even the first grant of a new
// group. The wait only happens in a new group's first moments (or while a
// restarted replica whose snapshot predates the ID replays its log).
func (r *Shard) awaitGroupID(ctx context.Context) error {
	select {
	case <-r.GroupKnown():
		return nil
	default:
	}
	if err := r.check(ctx, nil); err != nil {
		return err
	}
	select {
	case <-r.GroupKnown():
		return nil
	case <-r.Done():
		return r.ClosedErr()
	case <-ctx.Done():
		return r.unavailable(ctx.Err(), errNoGroupID)
	}
}

func retryable(err error) bool {
	return dragonboat.IsTempError(err) ||
		errors.Is(err, dragonboat.ErrCanceled) ||
		errors.Is(err, proposer.ErrLeaderChanged) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled)
}

// backoff spaces retries: it starts at one raft tick, the time a missing
// leader needs to appear at best, and doubles up to 20 ticks. A wait ends
// early when a leader becomes known: a call that found no leader goes again
// the moment one is elected, not up to 20 ticks later.
type backoff struct{ cur, limit time.Duration }

func newBackoff(rtt time.Duration) *backoff { return &backoff{cur: rtt, limit: 20 * rtt} }

func (b *backoff) wait(ctx context.Context, closed, leader <-chan struct{}) {
	t := time.NewTimer(b.cur)
	defer t.Stop()
	b.cur = min(2*b.cur, b.limit)
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-closed:
	case <-leader:
	}
}

// StaleRead runs q on this replica's copy of the state, without asking the
// group: it may lag behind the leader. Once the replica stopped it fails
// with ErrClosed, or why the group stopped here (ErrGroupDropped, ...).
func (r *Shard) StaleRead(q fsm.Query) (any, error) {
	v, err := r.staleRead(q)
	if g := r.host.Replaced(context.Background(), r, err); g != nil { // a local read has no deadline: lookupLimit bounds the lookup
		return g.StaleRead(q) // the shard moved off: through its mirror now
	}
	return v, err
}

// staleRead is StaleRead on the shard.
func (r *Shard) staleRead(q fsm.Query) (any, error) {
	select {
	case <-r.Done():
		return nil, r.ClosedErr()
	default:
	}
	v, _, err := r.LocalRead(q)
	return v, err
}

// LocalRead runs q on the shard's state machine here, which Dragonboat
// serialises with its updates: no entry is applied during q. A stop in
// flight destroys the state machine: then admitted is false, and the
// call fails with why the shard stopped (calls.go).
func (r *Shard) LocalRead(q fsm.Query) (v any, admitted bool, err error) {
	if !r.calls.enter() {
		return nil, false, r.stoppedErr()
	}
	defer r.calls.exit()
	v, err = r.nh.StaleRead(r.ShardID(), q)
	return v, true, err
}

// AwaitApplied waits until the shard r applied index, polling (a
// mirror's calls wait so for the shard that took over from it:
// mirror.Successor).
func (r *Shard) AwaitApplied(ctx context.Context, index uint64) error {
	for r.AppliedIndex.Load() < index {
		t := time.NewTimer(r.cfg.RTT)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Unavailable(ctx.Err(), fmt.Errorf("waiting for index %d", index))
		case <-r.Done():
			t.Stop()
			return r.ClosedErr()
		}
	}
	return nil
}
