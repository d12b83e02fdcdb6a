// Package fencefile is a resource fenced by fencing tokens: an
// append-only file of records that admits a write only if it carries a
// fencing token no lower than the highest it has admitted, from the group
// the file is keyed to. It holds across processes and restarts: the mark
// (the highest token, and the group) is persisted next to the file, and
// every write, under an exclusive file lock, reads that mark and checks the
// write's fence against it by fencelock.Fencer's rule.
//
// A lock holder (or leader) claims the file as soon as it is granted, and
// writes with the grant's context, which AppendGrant re-checks under the
// file's lock immediately before the write:
//
//	lctx := lock.Context(ctx) // ends with the grant
//	if err := f.ClaimGrant(lctx, lock.Fence()); err != nil {
//		return err // a later holder already claimed, or the grant is over
//	}
//	for ... {
//		if err := f.AppendGrant(lctx, lock.Fence(), record); err != nil {
//			return err // stale, another group, or the grant is over: stop
//		}
//	}
//
// The claim refuses the predecessor's later writes before this holder's
// first; the re-check refuses this holder's own writes once its grant is
// over by its clock (it woke from a pause and its ticker won a select
// before its deadline timer ran), even before a successor has claimed.
//
// A real resource (a database, an object store) would make the same check
// inside its own write path; the point is that the check happens at the
// resource, so a deposed leader that wakes from a pause cannot write.
//
// # Groups
//
// A token orders only the grants of one group (see fencelock.Fence). The
// file is keyed to the first nonzero group it admits (AppendFence,
// ClaimFence), and from then on refuses another group's fences with an
// error satisfying errors.Is(err, fencelock.ErrOtherGroup), whatever their
// tokens, until Rekey. Append and Claim, which take a bare token, and
// fences with Group 0 are checked by their token alone.
//
// # The mark file
//
// path+".mark" holds one line: the group in 16 hex digits, a colon, and the
// highest token in decimal ("000000000000feed:262144\n", the fence's
// String form; the token is 0 after Rekey). A file written before marks
// kept their group holds the token alone ("262144\n"), read as group 0; it
// is rewritten in the new form when its mark next changes. A mark without
// its final newline (a truncated file: fencefile replaces the mark by
// renaming, so it never leaves one) is corrupt rather than read as a lower
// token.
package fencefile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock"
)

// ErrCorrupt reports a record or mark file that cannot be parsed.
var ErrCorrupt = errors.New("fencefile: corrupt file")

// File is one process's handle on a fenced file. Its methods are safe for
// concurrent use, and several processes may write the same file.
type File struct {
	path string
}

// Record is one admitted write.
type Record struct {
	Token uint64
	Text  string
}

// Open returns a handle on the fenced file at path, creating it if needed.
// Next to it live path+".mark" (the highest admitted token and the file's
// group) and path+".lock".
func Open(path string) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, err
	}
	f.Close()
	return &File{path: path}, nil
}

// Append adds a record written under token. A token lower than the highest
// the file has admitted, from any process at any time, is refused with an
// error satisfying errors.Is(err, fencelock.ErrStaleToken), and nothing is
// written. The mark is persisted before the record, so a crash between the
// two can lose the record but never the refusal of older tokens. The token
// is checked alone, whatever group the file is keyed to; AppendFence checks
// the group too.
//
// A record is one line: it must not contain '\n' or '\r'.
func (f *File) Append(token uint64, record []byte) error {
	return f.AppendFence(fencelock.Fence{Token: token}, record)
}

// AppendFence is Append for a fence (lock.Fence()): a fence of another
// nonzero group than the one the file is keyed to is refused with an error
// satisfying errors.Is(err, fencelock.ErrOtherGroup) (a
// *fencelock.OtherGroupError), and nothing is written; the first admitted
// nonzero group keys the file. Group 0 is checked as Append checks a token.
func (f *File) AppendFence(fence fencelock.Fence, record []byte) error {
	text := string(record)
	if strings.ContainsAny(text, "\n\r") {
		return fmt.Errorf("fencefile: a record is one line: %q", text)
	}
	return f.admit(fence, func() error {
		return appendLine(f.path, fmt.Sprintf("%d %s\n", fence.Token, text))
	})
}

// AppendGrant is the write for a lock holder or leader: AppendFence with
// the grant's context (lock.Context, leadership.Context), which it re-checks
// by the holder's clock (fencelock.GrantErr) under the file's lock, after the
// fence is admitted and immediately before the mark and the record are
// written. Once the grant is over (a holder that woke from a pause past its
// deadline, whose ticker won the select before its deadline timer ran) it
// returns an error wrapping the grant's reason (fencelock.ErrSessionExpired,
// fencelock.ErrNotLeader, ...) and writes nothing, even while no successor
// has claimed the file yet. A ctx that ended otherwise (canceled) also
// writes nothing, and its error is returned. Refusals by the fence are as
// AppendFence's.
//
// Use it with a claim at grant time (ClaimGrant as the successor's first
// act): the re-check stops a holder whose grant is over by its own clock;
// the claim stops one that paused after its last check, once the successor
// has claimed.
//
//	lctx := lock.Context(ctx)
//	if err := f.ClaimGrant(lctx, lock.Fence()); err != nil { ... } // at grant
//	...
//	if err := f.AppendGrant(lctx, lock.Fence(), record); err != nil {
//		// stale, another group, or the grant is over: stop writing
//	}
func (f *File) AppendGrant(ctx context.Context, fence fencelock.Fence, record []byte) error {
	text := string(record)
	if strings.ContainsAny(text, "\n\r") {
		return fmt.Errorf("fencefile: a record is one line: %q", text)
	}
	return f.admitGrant(ctx, fence, func() error {
		return appendLine(f.path, fmt.Sprintf("%d %s\n", fence.Token, text))
	})
}

// ClaimGrant is ClaimFence with the grant's context, re-checked as
// AppendGrant re-checks it: a new holder's first act, so that its
// predecessor's later writes are refused from when ClaimGrant returns nil.
func (f *File) ClaimGrant(ctx context.Context, fence fencelock.Fence) error {
	return f.admitGrant(ctx, fence, func() error { return nil })
}

// admitGrant is admit with ctx checked before the lock is taken (no need to
// wait for it) and again under it, after the fence is admitted and before
// anything is written, so that nothing lies between the last check and the
// write but the write itself.
func (f *File) admitGrant(ctx context.Context, fence fencelock.Fence, write func() error) error {
	if err := grantOver(ctx, f.path, fence); err != nil {
		return err
	}
	return f.admitChecked(fence, func() error { return grantOver(ctx, f.path, fence) }, write)
}

// grantOver returns why ctx's grant is over, or ctx's own error; nil while
// ctx holds.
func grantOver(ctx context.Context, path string, fence fencelock.Fence) error {
	if err := fencelock.GrantErr(ctx); err != nil {
		return fmt.Errorf("fencefile: %s: %s not written, the grant in ctx is over: %w", path, fence, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fencefile: %s: %s not written: %w", path, fence, err)
	}
	return nil
}

// Claim raises the file's mark to token without writing a record, refusing a
// stale token as Append does. The mark is fsynced before Claim returns.
func (f *File) Claim(token uint64) error {
	return f.ClaimFence(fencelock.Fence{Token: token})
}

// ClaimFence is Claim for a fence, checked as AppendFence checks it; the
// first admitted nonzero group keys the file.
func (f *File) ClaimFence(fence fencelock.Fence) error {
	return f.admit(fence, func() error { return nil })
}

// Rekey keys the file to group and resets its mark to 0, durably, so that
// the new group's tokens are admitted from the lowest on and every other
// group's are refused with fencelock.ErrOtherGroup: the operator's answer
// to ErrOtherGroup when the group was replaced on purpose (bootstrapped
// again from empty Dirs, whose tokens restart low). group 0 is refused with
// an error wrapping fencelock.ErrInvalidFence.
//
// Re-key only once every holder of the old group has stopped: the reset
// mark refuses none of the new group's tokens, and a holder of the old group
// that still writes with a bare token (Append) is admitted by its token
// alone.
func (f *File) Rekey(group uint64) error {
	if group == 0 {
		return fmt.Errorf("%w: re-keying %s to group 0: name the new group's ID (Status.GroupID)", fencelock.ErrInvalidFence, f.path)
	}
	unlock, err := lockFile(f.path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	return writeMark(f.path+".mark", fencelock.Fence{Group: group})
}

// lockedForTest, if set, runs once a write holds the file's lock: a test's
// way to act between taking the lock and writing.
var lockedForTest func()

// Close releases the handle. It holds no open descriptors between calls, so
// Close only exists for symmetry and future use; it always returns nil.
func (f *File) Close() error { return nil }

// admit checks fence against the mark on disk under the file lock, by
// fencelock.Fencer's rule (on a Fencer seeded with that mark, so the rule
// and its errors are the library's), and persists the new mark, if it
// changed, before write runs.
func (f *File) admit(fence fencelock.Fence, write func() error) error {
	return f.admitChecked(fence, nil, write)
}

// admitChecked is admit that calls recheck, if not nil, once the fence is
// admitted and before anything is written; its error writes nothing.
func (f *File) admitChecked(fence fencelock.Fence, recheck, write func() error) error {
	unlock, err := lockFile(f.path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	if lockedForTest != nil {
		lockedForTest()
	}
	mark, err := readMark(f.path + ".mark")
	if err != nil {
		return err
	}
	rule := fencelock.NewFencer()
	if mark.Group != 0 {
		if err := rule.Rekey(f.path, mark.Group); err != nil {
			return err
		}
	}
	rule.Raise(f.path, mark.Token) // what other processes and earlier runs admitted
	return rule.DoFence(f.path, fence, func() error {
		// Admitted: the token is the new highest, and a file keyed to no
		// group takes the fence's.
		if recheck != nil {
			if err := recheck(); err != nil {
				return err
			}
		}
		next := fencelock.Fence{Group: mark.Group, Token: fence.Token}
		if next.Group == 0 {
			next.Group = fence.Group
		}
		if next != mark {
			if err := writeMark(f.path+".mark", next); err != nil {
				return err
			}
		}
		return write()
	})
}

// Highest returns the highest token the file has admitted; 0 if none (or
// none since Rekey).
func (f *File) Highest() (uint64, error) {
	m, err := readMark(f.path + ".mark")
	return m.Token, err
}

// Group returns the group the file is keyed to; 0 if none yet.
func (f *File) Group() (uint64, error) {
	m, err := readMark(f.path + ".mark")
	return m.Group, err
}

// Read returns the records of the fenced file at path, in the order they
// were admitted.
func Read(path string) ([]Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var records []Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		tok, text, _ := strings.Cut(sc.Text(), " ")
		t, err := strconv.ParseUint(tok, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorrupt, len(records)+1, err)
		}
		records = append(records, Record{Token: t, Text: text})
	}
	return records, sc.Err()
}

// readMark returns the mark at path as a fence (Token is the highest); the
// zero fence if there is none yet.
func readMark(path string) (fencelock.Fence, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fencelock.Fence{}, nil
	}
	if err != nil {
		return fencelock.Fence{}, err
	}
	mark, err := parseMark(data)
	if err != nil {
		return fencelock.Fence{}, fmt.Errorf("%w: mark %s: %v", ErrCorrupt, path, err)
	}
	return mark, nil
}

// parseMark decodes a mark file's contents (see The mark file). It is
// stricter than fencelock.ParseFence: the final newline is required, so a
// truncated mark is not read as a lower one, and token 0 is allowed, as
// Rekey writes it.
func parseMark(data []byte) (fencelock.Fence, error) {
	s, ok := strings.CutSuffix(string(data), "\n")
	if !ok {
		return fencelock.Fence{}, errors.New("no final newline")
	}
	var m fencelock.Fence
	group, token, keyed := strings.Cut(s, ":")
	if !keyed {
		token = s // the first format: the token alone, group 0
	} else {
		if len(group) != 16 {
			return fencelock.Fence{}, fmt.Errorf("group %q is not 16 hex digits", truncate(group))
		}
		g, err := strconv.ParseUint(group, 16, 64)
		if err != nil {
			return fencelock.Fence{}, fmt.Errorf("group %q is not 16 hex digits", group)
		}
		m.Group = g
	}
	// ParseUint in base 10 takes digits only: no sign, space or prefix.
	t, err := strconv.ParseUint(token, 10, 64)
	if err != nil {
		return fencelock.Fence{}, fmt.Errorf("token %q is not a decimal uint64", truncate(token))
	}
	m.Token = t
	return m, nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// formatMark encodes a mark as parseMark reads it.
func formatMark(m fencelock.Fence) []byte {
	return fmt.Appendf(nil, "%016x:%d\n", m.Group, m.Token)
}

// writeMark replaces the mark durably: a crash leaves the old or the new
// mark, never a torn one.
func writeMark(path string, mark fencelock.Fence) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, formatMark(mark), 0o644); err != nil {
		return err
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncFile(filepath.Dir(path))
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
