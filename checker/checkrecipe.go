package checker

import (
	"fmt"
	"sort"
)

// splitRecipes splits ops into the mutexes' and elections' and the shared
// locks' and semaphores'.
func splitRecipes(ops []Op) (mutex, recipe []Op) {
	for _, op := range ops {
		if isRecipe(op.Lock) {
			recipe = append(recipe, op)
		} else {
			mutex = append(mutex, op)
		}
	}
	return mutex, recipe
}

// section is one grant of a shared lock or semaphore with what the history
// tells of its end. It is certain when its Release returned OK: the grant
// was current from before its Acquire returned (the grant took effect
// within the call) until after its Release was called (the release found
// it current, and a grant that ended never comes back), so it was current
// throughout [granted, released]. Any other section (released NotHeld or
// Unknown, its session lost, held at the end) may have ended at any time
// after it was granted.
type section struct {
	Op               // the grant: Token, Shared, Permits, Return
	released   int64 // the Release's call; certain sections only
	certain    bool
	releasedBy Outcome // the Release's outcome; 0 if none
	releaseRet int64
}

// sectionsOf returns the grants of ops, by name, in token order, with their
// releases.
func sectionsOf(ops []Op) map[string][]section {
	rel := map[uint64]Op{}
	for _, op := range ops {
		if op.Kind == OpRelease {
			rel[op.Token] = op
		}
	}
	out := map[string][]section{}
	for _, op := range ops {
		if !op.Kind.grants() || op.Outcome != Granted {
			continue
		}
		s := section{Op: op}
		if r, ok := rel[op.Token]; ok {
			s.releasedBy, s.releaseRet = r.Outcome, r.Return
			if r.Outcome == OK {
				s.certain, s.released = true, r.Call
			}
		}
		out[op.Lock] = append(out[op.Lock], s)
	}
	for _, ss := range out {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Token < ss[j].Token })
	}
	return out
}

// sharedLoses is loses for shared locks and semaphores: for every grant not
// released with OK, a Lose from the grant's call (it may have ended before
// its caller heard of it) until the first of: end(name), the return of a
// Release that found it gone (NotHeld), and, for a shared lock, the return
// of the first later grant it excludes (an exclusive grant frees every
// earlier grant first; a shared one every earlier exclusive grant). A
// semaphore's lost grant has no such bound: later permits may be granted
// beside it. The grants that acquires of unknown outcome may have made
// need no Lose: SharedModel withdraws them at any moment.
func sharedLoses(ops []Op, end func(name string) int64) []Op {
	var out []Op
	for name, ss := range sectionsOf(ops) {
		for i, s := range ss {
			if s.certain {
				continue
			}
			ret := end(name)
			if s.releasedBy == NotHeld {
				ret = min(ret, s.releaseRet)
			}
			if s.Permits == 0 {
				for _, later := range ss[i+1:] {
					if !later.Shared || !s.Shared {
						ret = min(ret, later.Return)
						break
					}
				}
			}
			out = append(out, Op{Client: s.Client, Kind: OpLose, Lock: name, Session: s.Session,
				Token: s.Token, Outcome: OK, Call: s.Call, Return: max(ret, s.Call)})
		}
	}
	return out
}

// sharedHistory is the history SharedModel checks: ops, their Loses and
// the final reads. Every client had stopped before the final read of a
// lock was called, so nothing it did is concurrent with that read but
// calls of unknown outcome, and the Loses of grants it shows gone: those
// end at the read's call. That costs no legal history (every unknown
// outcome includes "nothing happened", and a grant freed during the read
// is freed before it for every operation there is), and spares porcupine
// orders of pending calls around the read.
func sharedHistory(ops, reads []Op) []Op {
	readAt := map[string]int64{}
	for _, r := range reads {
		readAt[r.Lock] = r.Call
	}
	end := func(name string) int64 {
		if at, ok := readAt[name]; ok {
			return at
		}
		return never
	}
	h := append([]Op(nil), ops...)
	for i := range h {
		if h[i].Outcome == Unknown {
			h[i].Return = max(min(h[i].Return, end(h[i].Lock)), h[i].Call)
		}
	}
	h = append(h, sharedLoses(ops, end)...)
	return append(h, reads...)
}

// sections checks the critical sections of shared locks and semaphores in
// real time, from the history alone. When a grant G took effect (before
// its Acquire returned), every certain section S with a lower token (so
// granted before G) whose Release was called after G's Acquire returned
// was current too. So at G's grant: an exclusive G, or an exclusive such
// S, is a violation (exclusive sections interleave with another), and a
// semaphore with more than its permits current (G and such sections) is a
// violation. G itself need not be certain: it was current at its grant
// whatever became of it later, which makes the check cover grants that
// were lost before their release, and real-time overlaps of two certain
// sections (the later-granted one's grant falls inside the other).
func sections(ops []Op) []string {
	var v []string
	for name, ss := range sectionsOf(ops) {
		for i, g := range ss {
			current := 1
			for _, s := range ss[:i] {
				if !s.certain || s.released <= g.Return {
					continue
				}
				if !g.Shared || !s.Shared {
					v = append(v, fmt.Sprintf("%q: token %d (shared=%v, client %d) granted while token %d (shared=%v, client %d) held it",
						name, g.Token, g.Shared, g.Client, s.Token, s.Shared, s.Client))
				}
				current++
			}
			if g.Permits > 0 && current > g.Permits {
				v = append(v, fmt.Sprintf("%q: %d permits held at once at the grant of token %d, of %d",
					name, current, g.Token, g.Permits))
			}
		}
	}
	return v
}

// readsFenced checks the readers' looks at the register: a reader whose
// section is certain never saw, before its Release was called, a mark
// (a writer's admitted token) above its own token. Such a writer was
// granted after the reader (a higher token) and before the look, while the
// reader held the lock.
func readsFenced(ops []Op, reads map[string][]Read) []string {
	var v []string
	all := sectionsOf(ops)
	for name, rs := range reads {
		byToken := map[uint64]section{}
		for _, s := range all[name] {
			byToken[s.Token] = s
		}
		for _, r := range rs {
			s, ok := byToken[r.Token]
			if ok && s.certain && r.At < s.released && r.Seen > r.Token {
				v = append(v, fmt.Sprintf("%q: reader client %d holding token %d saw a write with token %d",
					name, r.Client, r.Token, r.Seen))
			}
		}
	}
	return v
}

// RecipeCounts say how much of the recipes a scenario exercised.
type RecipeCounts struct {
	Exclusive, Shared, Permits int // grants on the shared lock by mode, and of the semaphore
	Certain                    int // sections whose Release returned OK
	// MaxReaders and MaxPermits are the most certain sections of the shared
	// lock and of the semaphore seen current at one grant: proof that the
	// grants did overlap, which the checks above are about.
	MaxReaders, MaxPermits int
}

// Covered reports whether the recipe workload ran: grants in every mode, and
// the shared lock and the semaphore each held twice at once.
func (c RecipeCounts) Covered() bool {
	return c.Exclusive > 0 && c.Shared > 0 && c.Permits > 0 && c.MaxReaders >= 2 && c.MaxPermits >= 2
}

func recipeCounts(ops []Op) RecipeCounts {
	var c RecipeCounts
	for _, ss := range sectionsOf(ops) {
		for i, g := range ss {
			switch {
			case g.Permits > 0:
				c.Permits++
			case g.Shared:
				c.Shared++
			default:
				c.Exclusive++
			}
			if g.certain {
				c.Certain++
			}
			if !g.Shared {
				continue
			}
			current := 1
			for _, s := range ss[:i] {
				if s.certain && s.released > g.Return {
					current++
				}
			}
			if g.Permits > 0 {
				c.MaxPermits = max(c.MaxPermits, current)
			} else {
				c.MaxReaders = max(c.MaxReaders, current)
			}
		}
	}
	return c
}
