// Package fencefile is a resource fenced by fencing tokens: an
// append-only file of records that admits a write only if it carries a
// fencing token no lower than the highest it has admitted. It holds across
// processes and restarts: the highest token is persisted next to the file,
// and every write, under an exclusive file lock, restores that mark into the
// writer's Fencer before the Fencer checks the token.
//
// A real resource (a database, an object store) would make the same check
// inside its own write path; the point is that the check happens at the
// resource, so a deposed leader that wakes from a pause cannot write.
package fencefile

import (
	"bufio"
	"bytes"
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
	path   string
	fencer *fencelock.Fencer // this process's view of the mark, restored before each write
}

// Record is one admitted write.
type Record struct {
	Token uint64
	Text  string
}

// Open returns a handle on the fenced file at path, creating it if needed.
// Next to it live path+".mark" (the highest admitted token) and path+".lock".
func Open(path string) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, err
	}
	f.Close()
	return &File{path: path, fencer: fencelock.NewFencer()}, nil
}

// Append adds a record written under token. A token lower than the highest
// the file has admitted, from any process at any time, is refused with an
// error satisfying errors.Is(err, fencelock.ErrStaleToken), and nothing is
// written. The mark is persisted before the record, so a crash between the
// two can lose the record but never the refusal of older tokens.
//
// A record is one line: it must not contain '\n' or '\r'.
func (f *File) Append(token uint64, record []byte) error {
	text := string(record)
	if strings.ContainsAny(text, "\n\r") {
		return fmt.Errorf("fencefile: a record is one line: %q", text)
	}
	return f.admit(token, func() error {
		return appendLine(f.path, fmt.Sprintf("%d %s\n", token, text))
	})
}

// Claim raises the file's mark to token without writing a record, refusing a
// stale token as Append does. The mark is fsynced before Claim returns.
func (f *File) Claim(token uint64) error {
	return f.admit(token, func() error { return nil })
}

// Close releases the handle. It holds no open descriptors between calls, so
// Close only exists for symmetry and future use; it always returns nil.
func (f *File) Close() error { return nil }

func (f *File) admit(token uint64, write func() error) error {
	unlock, err := lockFile(f.path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	mark, err := readMark(f.path + ".mark")
	if err != nil {
		return err
	}
	f.fencer.Raise(f.path, mark) // what other processes and earlier runs admitted
	return f.fencer.Do(f.path, token, func() error {
		if token > mark {
			if err := writeMark(f.path+".mark", token); err != nil {
				return err
			}
		}
		return write()
	})
}

// Highest returns the highest token the file has admitted; 0 if none.
func (f *File) Highest() (uint64, error) { return readMark(f.path + ".mark") }

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

func readMark(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	mark, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: mark %s: %v", ErrCorrupt, path, err)
	}
	return mark, nil
}

// writeMark replaces the mark durably: a crash leaves the old or the new
// mark, never a torn one.
func writeMark(path string, mark uint64) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(mark, 10)+"\n"), 0o644); err != nil {
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
