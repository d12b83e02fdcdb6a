package session

// The requests of the root's lock and election calls: each checks its
// arguments in the order the root documents, routes the name to its group
// and builds the command, then runs it as a numbered request (Request).

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Acquire asks for lock name: exclusive, or with shared, shared (permits 0)
// or one permit of a semaphore of permits; with wait it queues, else it
// fails at once if the lock is taken. It checks the name, then o, then
// routes the name: the errors ErrInvalidName, ErrInvalidMaxHold and the
// unknown group's.
func (s *Session) Acquire(ctx context.Context, name string, shared bool, permits int, wait bool, o RequestOptions) (*Grant, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := s.checkRequest(o); err != nil {
		return nil, err
	}
	cmd := fsm.Command{Kind: fsm.KindAcquire, Name: name, Wait: wait}
	if shared {
		cmd.Kind, cmd.Permits = fsm.KindAcquireShared, uint64(permits)
	}
	group, _, err := s.h.Route(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.Request(ctx, group, cmd, o)
}

// Campaign enters election as a candidate with value; with wait it queues,
// else it fails at once if the election is led. It checks the name, the
// value, then o, then routes the name.
func (s *Session) Campaign(ctx context.Context, election, value string, wait bool, o RequestOptions) (*Grant, error) {
	if err := checkCampaign(election, value); err != nil {
		return nil, err
	}
	if err := s.checkRequest(o); err != nil {
		return nil, err
	}
	group, _, err := s.h.Route(ctx, election)
	if err != nil {
		return nil, err
	}
	return s.Request(ctx, group, fsm.Command{Kind: fsm.KindCampaign, Name: election, Value: value, Wait: wait}, o)
}

// CheckCampaign reports the error Campaign would return for its arguments
// before asking the group anything: for a call (RunElection) that checks
// them before it opens a session.
func (h *Host) CheckCampaign(election, value string) error {
	if err := checkCampaign(election, value); err != nil {
		return err
	}
	_, _, err := h.Route(context.Background(), election)
	return err
}

func checkCampaign(election, value string) error {
	if err := checkName(election); err != nil {
		return err
	}
	return checkValue(value)
}

// checkRequest refuses a maximum hold outside [2×margin, MaxHoldLimit]:
// below twice the margin the holder would stop within a margin of its
// grant, or before it, and could not use the lock.
func (s *Session) checkRequest(o RequestOptions) error {
	margin := s.SafetyMargin()
	if o.MaxHold != 0 && (o.MaxHold < 2*margin || o.MaxHold > MaxHoldLimit) {
		return fmt.Errorf("%w: %v must lie in [%v, %v] (twice the safety margin)",
			ErrInvalidMaxHold, o.MaxHold, 2*margin, MaxHoldLimit)
	}
	return nil
}
