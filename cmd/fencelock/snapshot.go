package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
)

const snapshotUsage = `usage:
  fencelock snapshot save [--http URL,...] [--token-file F] FILE
  fencelock snapshot restore FILE --dir DIR --id N --peers ID=HOST:PORT,... [--group NAME=ID,ID,...]... [--addr HOST:PORT] [--raft-listen ADDR]
  fencelock snapshot info FILE [-o json]
`

// snapshotCmd saves a backup of a running deployment (GET /v1/snapshot, an
// admin token), restores one into a new replica's Dir, or checks one.
func snapshotCmd(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, snapshotUsage)
		return exitError{2}
	}
	switch args[0] {
	case "save":
		return snapshotSave(args[1:])
	case "restore":
		return snapshotRestore(args[1:])
	case "info":
		return snapshotInfo(args[1:])
	case "-h", "--help", "help":
		fmt.Print(snapshotUsage)
		return nil
	}
	fmt.Fprintf(os.Stderr, "fencelock: unknown snapshot command %q\n%s", args[0], snapshotUsage)
	return exitError{2}
}

// snapshotSave downloads a backup from the first replica that answers, into
// FILE.partial, checks it whole (fencelock.ReadBackup), and only then
// renames it to FILE: FILE is never a file that would not restore.
func snapshotSave(args []string) error {
	fs := newFlags("snapshot save", "[flags] FILE")
	var cf clientFlags
	cf.register(fs)
	rest, err := parseArgs(fs, args, 1, "one FILE")
	if err != nil {
		return err
	}
	file := rest[0]
	if _, err := parseBases(cf.url); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cf.apiClient(ctx)
	if err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	defer c.Close()
	tmp := file + ".partial"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	defer f.Close()
	// Each replica's answer starts the file over: a download cut short on
	// one replica leaves nothing behind when the next answers.
	restart := func() (io.Writer, error) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		return f, f.Truncate(0)
	}
	if err := c.Download(ctx, httpapi.SnapshotPath, restart); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	info, err := fencelock.ReadBackup(f)
	if err != nil {
		return fmt.Errorf("snapshot save: the replica's answer is not a whole backup: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		return err
	}
	printBackup(os.Stdout, file, info)
	return nil
}

// snapshotRestore seeds a new replica's Dir from a backup: run it once per
// replica of the new deployment, each with the flags it will be served
// with, then start every replica with serve.
func snapshotRestore(args []string) error {
	fs := newFlags("snapshot restore", "FILE --dir DIR --id N --peers ID=HOST:PORT,... [flags]")
	id := fs.Uint64("id", 0, "the replica's ID in the new deployment (required)")
	peers := fs.String("peers", "", "the new deployment's voters, ID=HOST:PORT of raft, comma-separated, as serve's --peers (required)")
	fs.StringVar(peers, "members", "", "the same as --peers")
	dir := fs.String("dir", "", "the new replica's data directory: absent or empty (required)")
	raftAddr := fs.String("addr", "", "this replica's raft address, as serve's --addr (default: its --peers entry)")
	raftListen := fs.String("raft-listen", "", "as serve's --raft-listen")
	var groups groupFlags
	fs.Var(&groups, "group", "a named group, NAME=ID,ID,... of its voters, as serve's --group (repeatable): every group of the backup")
	placement := fs.String("placement", "every", "as serve's --placement: with own, the replica records no raft replica of the groups it does not vote in")
	rest, err := parseAll(fs, args)
	if err != nil {
		return err
	}
	place, err := parsePlacement(*placement)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("snapshot restore: want one FILE, got %d arguments", len(rest))
	}
	file := rest[0]
	members, err := parseIDMap("peers", *peers)
	if err != nil {
		return err
	}
	switch {
	case *id == 0:
		return errors.New("snapshot restore: --id is required")
	case len(members) == 0:
		return errors.New("snapshot restore: --peers is required")
	case *dir == "":
		return errors.New("snapshot restore: --dir is required")
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	cfg := fencelock.Config{ReplicaID: *id, Members: members, Addr: *raftAddr, ListenAddr: *raftListen, Dir: *dir, Groups: groups,
		Placement: place}
	info, err := fencelock.Restore(f, cfg)
	if err != nil {
		return err
	}
	abs, _ := filepath.Abs(*dir)
	fmt.Printf("restored replica %d's Dir %s from %s; start it with serve and the same --id, --peers, --group and --placement flags\n", *id, abs, file)
	printBackup(os.Stdout, file, info)
	return nil
}

// snapshotInfo checks a backup whole and describes it.
func snapshotInfo(args []string) error {
	fs := newFlags("snapshot info", "FILE [-o text|json]")
	output := fs.String("o", "text", "output: text or json")
	rest, err := parseArgs(fs, args, 1, "one FILE")
	if err != nil {
		return err
	}
	file := rest[0]
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := fencelock.ReadBackup(f)
	if err != nil {
		return err
	}
	if *output, err = checkOutput("snapshot info", *output); err != nil {
		return err
	}
	if *output == "json" {
		return json.NewEncoder(os.Stdout).Encode(info)
	}
	printBackup(os.Stdout, file, info)
	return nil
}

func printBackup(w io.Writer, file string, info fencelock.BackupInfo) {
	fmt.Fprintf(w, "%s: deployment %d, taken %s by replica %d\n", file, info.DeploymentID, info.TakenAt.Format("2006-01-02T15:04:05Z07:00"), info.TakenBy)
	fmt.Fprintf(w, "%-12s %-16s %10s %8s %20s %8s %6s %9s %13s\n", "GROUP", "GROUP ID", "INDEX", "TERM", "LAST TOKEN", "SESSIONS", "LOCKS", "ELECTIONS", "RESTORE EPOCH")
	for _, g := range info.Groups {
		name := g.Name
		if name == "" {
			name = "(default)"
		}
		fmt.Fprintf(w, "%-12s %016x %10d %8d %20d %8d %6d %9d %13d\n", name, g.GroupID, g.Index, g.Term, g.LastToken, g.Sessions, g.Locks, g.Elections, g.RestoreEpoch)
	}
}
