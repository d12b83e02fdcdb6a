package checker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/testhook"
)

// History records what every client did, when, and what the resource
// admitted. It is safe for concurrent use.
type History struct {
	start time.Time

	mu         sync.Mutex
	ops        []Op
	writes     map[string][]Write // by lock (election key): the register's log, in admission order
	reads      map[string][]Read  // by shared lock: its readers' looks at the register's mark
	refused    int                // late writes the Fencer refused
	violations []string           // found while running
	windows    []Window           // partitions, for the minority check
	notes      []string           // what a fault saw, for the test log
	suspects   []suspect          // grants a violation names, for its reader (dump.go)
}

// suspect is two grants of a lock (election key) that a violation names.
type suspect struct {
	name   string
	tokens [2]uint64
}

// suspectGrants records two grants a violation names, so that the group's
// applied commands around them are written for its reader.
func (h *History) suspectGrants(name string, a, b uint64) {
	h.mu.Lock()
	h.suspects = append(h.suspects, suspect{name, [2]uint64{a, b}})
	h.mu.Unlock()
}

func (h *History) suspectsSnapshot() []suspect {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]suspect(nil), h.suspects...)
}

// Write is one write the resource admitted.
type Write struct {
	Client int
	Token  uint64
	At     int64
}

// Read is one step of a reader of a shared lock: the highest writer token
// the register's Fencer had admitted when the reader holding Token looked.
type Read struct {
	Client int
	Token  uint64
	Seen   uint64
	At     int64
}

// Window is a time during which some replicas were cut off from a majority.
type Window struct {
	Start, End int64
	Minority   map[uint64]bool // replica IDs
}

func newHistory() *History {
	return &History{start: time.Now(), writes: make(map[string][]Write), reads: make(map[string][]Read)}
}

// now returns the time since the start, by the monotonic clock.
func (h *History) now() int64 { return int64(time.Since(h.start)) }

// begin records the call of an operation and returns its index.
func (h *History) begin(op Op) int {
	op.Call = h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.ops) + 1
	h.ops = append(h.ops, op)
	return len(h.ops) - 1
}

// track returns ctx recording in operation i the numbered request a call
// made with it (testhook.WithRequests).
func (h *History) track(ctx context.Context, i int) context.Context {
	return testhook.WithRequests(ctx, func(group string, part, seq uint64) {
		h.mu.Lock()
		h.ops[i].Req = reqRef{Group: group, Part: part, Seq: seq}
		h.mu.Unlock()
	})
}

// add records a completed operation whose call and return times are set:
// a read, recorded only if it returned something.
func (h *History) add(op Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.ops) + 1
	h.ops = append(h.ops, op)
}

// end records the return of operation i.
func (h *History) end(i int, out Outcome, token uint64) {
	at := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	op := &h.ops[i]
	op.Outcome, op.Return = out, at
	if out == Granted {
		op.Token = token
	}
	if out == Unknown {
		op.Return = never
	}
}

// endWhy is end for an operation whose Value says why it returned out (a
// Kept's, for a reader of a failing history; no model looks at it).
func (h *History) endWhy(i int, out Outcome, why string) {
	h.end(i, out, 0)
	h.mu.Lock()
	h.ops[i].Value = why
	h.mu.Unlock()
}

// write appends to the register of lock; it runs inside the Fencer's check.
func (h *History) write(lock string, client int, token uint64) {
	at := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.writes[lock] = append(h.writes[lock], Write{Client: client, Token: token, At: at})
}

// read records a reader's step.
func (h *History) read(lock string, client int, token, seen uint64) {
	at := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads[lock] = append(h.reads[lock], Read{Client: client, Token: token, Seen: seen, At: at})
}

func (h *History) refusedWrite() {
	h.mu.Lock()
	h.refused++
	h.mu.Unlock()
}

func (h *History) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.violations = append(h.violations, msg)
	h.mu.Unlock()
}

func (h *History) window(w Window) {
	h.mu.Lock()
	h.windows = append(h.windows, w)
	h.mu.Unlock()
}

// readsSnapshot returns a copy of the readers' steps.
func (h *History) readsSnapshot() map[string][]Read {
	h.mu.Lock()
	defer h.mu.Unlock()
	reads := make(map[string][]Read, len(h.reads))
	for k, v := range h.reads {
		reads[k] = append([]Read(nil), v...)
	}
	return reads
}

// snapshot returns copies of what was recorded.
func (h *History) snapshot() ([]Op, map[string][]Write, []Window, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	writes := make(map[string][]Write, len(h.writes))
	for k, v := range h.writes {
		writes[k] = append([]Write(nil), v...)
	}
	return append([]Op(nil), h.ops...), writes, append([]Window(nil), h.windows...),
		append([]string(nil), h.violations...)
}

// logf records a note for the scenario's test log.
func (h *History) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.notes = append(h.notes, msg)
	h.mu.Unlock()
}

// grantedWithin counts the grants in group to calls made and returned
// between from and to.
func (h *History) grantedWithin(group string, from, to int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, op := range h.ops {
		if op.Outcome == Granted && groupOf(op.Lock) == group && op.Call >= from && op.Return <= to {
			n++
		}
	}
	return n
}

// grantsSince counts, by group, the grants whose call returned after at.
func (h *History) grantsSince(at int64) map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := map[string]int{}
	for _, op := range h.ops {
		if op.Outcome == Granted && op.Return > at {
			n[groupOf(op.Lock)]++
		}
	}
	return n
}
