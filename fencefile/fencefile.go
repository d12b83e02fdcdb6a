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
// file is keyed to the first nonzero group it admits (AppendGrant,
// ClaimGrant, AppendFence, ClaimFence), and from then on refuses another group's fences with an
// error satisfying errors.Is(err, fencelock.ErrOtherGroup), whatever their
// tokens, until Rekey. Append and Claim, which take a bare token, and
// fences with Group 0 carry no group: on a file keyed to no group they are
// checked by their token alone and key nothing (a file only ever written
// with bare tokens works as it always did); on a file keyed to a group they
// are refused like another group's (errors.Is(err,
// fencelock.ErrOtherGroup), an *OtherGroupError with Fence.Group 0) and
// never raise the mark, so that a writer of another deployment cannot lift
// the mark over the group's next holder and have it refused as stale. Once
// a file is keyed, write it with fences (AppendGrant, AppendFence) only.
//
// # Records
//
// The file holds one line per admitted record: the token in decimal, a
// space, the record, '\n'. A record has no size limit beyond memory. A
// write cut short (ENOSPC, EIO, a crash mid-append) can leave a last line
// without its '\n': Read refuses such a file with ErrCorrupt rather than
// return the torn record, and the next admitted append, under the file's
// lock, truncates the torn line away before it writes, so that it is never
// glued to the next record.
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
// token. A missing mark beside a non-empty file (the mark was deleted, or
// the file copied without it) is ErrCorrupt too, rather than read as 0,
// which would admit every token; restore the mark, or Rekey the file.
package fencefile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

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
// is bare (group 0): checked alone on a file keyed to no group, refused
// with fencelock.ErrOtherGroup on a keyed one (see Groups); AppendFence and
// AppendGrant check a fence's group.
//
// A record is one line: it must not contain '\n' or '\r'.
func (f *File) Append(token uint64, record []byte) error {
	return f.AppendFence(fencelock.Fence{Token: token}, record)
}

// AppendFence is Append for a fence (lock.Fence()): a fence of another
// nonzero group than the one the file is keyed to is refused with an error
// satisfying errors.Is(err, fencelock.ErrOtherGroup) (a
// *fencelock.OtherGroupError), and nothing is written; the first admitted
// nonzero group keys the file. Group 0 is checked as Append checks a bare
// token (see Groups).
func (f *File) AppendFence(fence fencelock.Fence, record []byte) error {
	text := string(record)
	if strings.ContainsAny(text, "\n\r") {
		return fmt.Errorf("fencefile: a record is one line: %q", text)
	}
	return f.admit(fence, func() error {
		return appendLine(f.path, formatRecord(fence.Token, text))
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
		return appendLine(f.path, formatRecord(fence.Token, text))
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
// mark refuses none of the new group's tokens. Rekey is also the way out of
// a missing mark (ErrCorrupt): it writes a mark without reading one.
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
	mark, err := readMark(f.path)
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
		// The zero mark is also what a missing mark file reads as: write it
		// even unchanged then, since a record without a mark beside it is
		// corrupt (token 0, admitted on a fresh file, leaves it unchanged).
		if next != mark || (mark == fencelock.Fence{} && !exists(f.path+".mark")) {
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
	m, err := readMark(f.path)
	return m.Token, err
}

// Group returns the group the file is keyed to; 0 if none yet.
func (f *File) Group() (uint64, error) {
	m, err := readMark(f.path)
	return m.Group, err
}

// Read returns the records of the fenced file at path, in the order they
// were admitted. It reads under the file's lock, so it never sees an
// append in progress; where it cannot take the lock (no flock on this
// system, or no permission to open path+".lock" on a read-only copy) it
// reads without it. A file whose last line has
// no final '\n' (a torn write, see Records) or whose lines are not records
// as Append writes them is refused with ErrCorrupt, and no records are
// returned.
func Read(path string) ([]Record, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	unlock, err := lockFile(path + ".lock")
	if err != nil && !errors.Is(err, errors.ErrUnsupported) && !errors.Is(err, os.ErrPermission) && !errors.Is(err, syscall.EROFS) {
		return nil, err
	}
	if unlock != nil {
		defer unlock()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	records, err := parseRecords(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	return records, nil
}

// parseRecords decodes a file's contents: lines as formatRecord writes
// them, each ended by '\n'. It is strict, so that what it accepts formats
// back to the same bytes.
func parseRecords(data []byte) ([]Record, error) {
	var records []Record
	for len(data) > 0 {
		line, rest, ok := bytes.Cut(data, []byte("\n"))
		if !ok {
			return nil, fmt.Errorf("record %d has no final newline (a torn write, which the next append removes)", len(records)+1)
		}
		r, err := parseRecord(line)
		if err != nil {
			return nil, fmt.Errorf("record %d: %v", len(records)+1, err)
		}
		records = append(records, r)
		data = rest
	}
	return records, nil
}

func parseRecord(line []byte) (Record, error) {
	tok, text, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return Record{}, fmt.Errorf("no space after the token in %q", truncate(string(line)))
	}
	if bytes.IndexByte(text, '\r') >= 0 {
		return Record{}, errors.New("a record holds '\\r'")
	}
	if len(tok) > 1 && tok[0] == '0' {
		return Record{}, fmt.Errorf("token %q has a leading zero", truncate(string(tok)))
	}
	// ParseUint in base 10 takes digits only: no sign, space or prefix.
	t, err := strconv.ParseUint(string(tok), 10, 64)
	if err != nil {
		return Record{}, fmt.Errorf("token %q is not a decimal uint64", truncate(string(tok)))
	}
	return Record{Token: t, Text: string(text)}, nil
}

// formatRecord encodes a record as parseRecord reads it.
func formatRecord(token uint64, text string) string {
	return strconv.FormatUint(token, 10) + " " + text + "\n"
}

// readMark returns the mark of the fenced file at path as a fence (Token is
// the highest); the zero fence if there is none yet. A missing mark beside a
// non-empty file is corrupt: every write writes the mark first.
func readMark(path string) (fencelock.Fence, error) {
	data, err := os.ReadFile(path + ".mark")
	if errors.Is(err, os.ErrNotExist) {
		st, serr := os.Stat(path)
		if serr == nil && st.Size() > 0 {
			return fencelock.Fence{}, fmt.Errorf("%w: %s holds %d bytes but its mark %s.mark is missing "+
				"(restore the mark, or Rekey the file)", ErrCorrupt, path, st.Size(), path)
		}
		if serr != nil && !errors.Is(serr, os.ErrNotExist) {
			return fencelock.Fence{}, serr
		}
		return fencelock.Fence{}, nil
	}
	if err != nil {
		return fencelock.Fence{}, err
	}
	path += ".mark"
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

// fsync is (*os.File).Sync: a seam for the test that checks which
// descriptor is synced.
var fsync = (*os.File).Sync

// writeMark replaces the mark durably: a crash leaves the old or the new
// mark, never a torn one. The temp file is fsynced through the descriptor
// that wrote it, so that a write-back error is reported to this call
// (before Linux 4.16, a descriptor opened after the error did not see it).
func writeMark(path string, mark fencelock.Fence) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(formatMark(mark)); err != nil {
		f.Close()
		return err
	}
	if err := fsync(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// appendLine writes line at the end of the file at path, under the file's
// lock, after cutting away a torn last line (see Records), and fsyncs it. If
// the write or the fsync fails, the file is cut back to where the line
// began, so that a short write leaves no torn tail (and if that fails too,
// the next append cuts it).
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	end, err := cutTornTail(f)
	if err != nil {
		return fmt.Errorf("fencefile: %s: cutting a torn last record: %w", path, err)
	}
	if _, err := f.WriteAt([]byte(line), end); err != nil {
		_ = f.Truncate(end) // the write's error is the one to report
		return err
	}
	if err := fsync(f); err != nil {
		_ = f.Truncate(end)
		return err
	}
	return f.Close()
}

// cutTornTail truncates f after its last '\n' if bytes follow it (a torn
// last line), fsyncing the cut, and returns the resulting size: where the
// next line goes.
func cutTornTail(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	end := size
	buf := make([]byte, 64<<10)
	for end > 0 {
		n := min(int64(len(buf)), end)
		chunk := buf[:n]
		if _, err := f.ReadAt(chunk, end-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			end = end - n + int64(i) + 1
			break
		}
		end -= n
	}
	if end == size {
		return size, nil
	}
	if err := f.Truncate(end); err != nil {
		return 0, err
	}
	return end, fsync(f)
}

// exists reports whether path exists; an error other than its absence
// counts as existing, so that an unchanged mark is rewritten only when it is
// surely missing.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	return fsync(d)
}
