package checker

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
)

// lockDelay is the lock-delay of one slow client's sessions (WithLockDelay):
// when the group expires one, or an operator revokes its grant or ends it,
// slowLock is granted to nobody for that long. The other slow client has
// none, so that a holder cut off without one is checked by check 2 alone
// (SkewedHolderIsolated): a delay would hide a holder that stops late.
const lockDelay = ttl / 3

// delayedSessions returns the sessions with a lock-delay.
func (e *env) delayedSessions() map[uint64]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.delayed)
}

// lockDelays checks, from the group's applied log, that lock name was
// granted to nobody within d of an expiry or an operator's end of a grant
// to one of the sessions delayed (which have a lock-delay of d): the leader
// times the delay from when it applied that end, on its own clock
// (fastest: the fastest replica clock's rate), and the next grant is
// applied after the Undelay its timer proposes. Times are those at which
// each entry was first applied anywhere; a tenth of d is left for the
// moments between a replica's apply and its hook.
func lockDelays(l *appliedLog, name string, delayed map[uint64]bool, d time.Duration, fastest float64) []string {
	least := time.Duration(float64(d) / fastest * 0.9)
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.entries[groupOf(name)]
	idx := make([]uint64, 0, len(g))
	for i := range g {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var out []string
	var ended *fsm.Event // the last end of a grant that delays the lock
	var endedAt int64
	var endedIdx uint64
	for _, i := range idx {
		e := g[i]
		for _, ev := range e.events {
			if ev.Name != name {
				continue
			}
			switch ev.Kind {
			case fsm.EventFreed:
				ended = nil
				if delayed[ev.Session] && (ev.Reason == fsm.ReasonExpired || ev.Reason == fsm.ReasonRevoked) {
					ended, endedAt, endedIdx = &ev, e.at, i
				}
			case fsm.EventGranted:
				if ended != nil && time.Duration(e.at-endedAt) < least {
					out = append(out, fmt.Sprintf("lock-delay: %q granted (token %d, entry %d) %v after grant %d ended (%v, entry %d), whose session has a lock-delay of %v",
						name, ev.Token, i, time.Duration(e.at-endedAt).Round(time.Millisecond), ended.Token, ended.Reason, endedIdx, d))
				}
				ended = nil
			}
		}
	}
	return out
}

// operatorOnce checks, from every group's applied log, that an operator's
// command took effect at most once: a Revoke or EndSession whose proposal
// was retried (its first attempt's answer lost, or a leader change in
// between) reaches the log again with the same operation ID, and that
// second application must change nothing. A revocation applied twice ends
// the grant the first one handed on; the successor's holder is told
// ErrRevoked, so no other check can tell it from a second revocation.
func operatorOnce(l *appliedLog) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for group, g := range l.entries {
		idx := make([]uint64, 0, len(g))
		for i := range g {
			idx = append(idx, i)
		}
		slices.Sort(idx)
		first := map[uint64]uint64{} // operation ID -> the entry that first carried it
		for _, i := range idx {
			e := g[i]
			again := map[string]uint64{}      // lock names revoked by an operation applied before -> its ID
			fresh := map[string]bool{}        // lock names revoked by an operation applied first here
			endedAgain := map[uint64]uint64{} // sessions ended by an operation applied before
			for _, c := range e.cmds {
				if c.Op == 0 || (c.Kind != fsm.KindRevoke && c.Kind != fsm.KindEndSession) {
					continue
				}
				at, seen := first[c.Op]
				if !seen {
					first[c.Op] = i
					if c.Kind == fsm.KindRevoke {
						fresh[c.Name] = true
					}
					continue
				}
				if at == i {
					continue
				}
				if c.Kind == fsm.KindRevoke {
					again[c.Name] = c.Op
				} else {
					endedAgain[c.Session] = c.Op
				}
			}
			for _, ev := range e.events {
				switch {
				case (ev.Kind == fsm.EventFreed || ev.Kind == fsm.EventDeposed) && ev.Reason == fsm.ReasonRevoked:
					if op, ok := again[ev.Name]; ok && !fresh[ev.Name] {
						out = append(out, fmt.Sprintf("operator command applied twice: group %q, revocation op %x first applied at entry %d ended %q token %d again at entry %d",
							group, op, first[op], ev.Name, ev.Token, i))
					}
				case ev.Kind == fsm.EventSessionEnded && ev.Reason == fsm.ReasonRevoked:
					if op, ok := endedAgain[ev.Session]; ok {
						out = append(out, fmt.Sprintf("operator command applied twice: group %q, session end op %x first applied at entry %d ended session %d again at entry %d",
							group, op, first[op], ev.Session, i))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// operatorRetries counts the operator commands (by operation ID) that
// reached some group's log in more than one entry: retries that
// operatorOnce checks.
func (l *appliedLog) operatorRetries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, g := range l.entries {
		at := map[uint64]uint64{}
		for i, e := range g {
			for _, c := range e.cmds {
				if c.Op == 0 || (c.Kind != fsm.KindRevoke && c.Kind != fsm.KindEndSession) {
					continue
				}
				if first, ok := at[c.Op]; !ok {
					at[c.Op] = i
				} else if first != i {
					at[c.Op] = i
					n++
				}
			}
		}
	}
	return n
}
