// Command election is a replicated primary: start it three times, and the
// three processes elect one primary among them, which writes to a shared
// resource under its epoch.
//
//	go run ./examples/election -id 1
//	go run ./examples/election -id 2
//	go run ./examples/election -id 3
//
// Each process is a replica of a three-replica fencelock group (loopback
// ports 7101-7103 by default) and a candidate in the election "primary".
// The one elected prints
//
//	primary: replica N, epoch T
//
// and then writes to a shared file (-resource) under its epoch T, the safe
// way round (package fencefile):
//
//   - it claims the epoch at the file as soon as it is elected
//     (ClaimGrant), so the file refuses every earlier primary's writes from
//     then on, whether or not this one ever writes;
//   - it appends a record every -every through the term's context
//     (AppendGrant), which re-checks the term by this process's own clock
//     under the file's lock, right before the write. A primary that wakes
//     from a pause past its term's end finds its ticker ready and its
//     deadline timer not yet run; the re-check is what stops that write
//     while the successor's claim has not reached the file yet.
//
// The file refuses records whose epoch is lower than one it has admitted,
// across processes and restarts. Every process also observes the election
// and prints "leader: ..." on each change.
//
// Kill the primary with kill -9: once its session's TTL (-ttl) has run out
// at the group, the next candidate in line becomes primary with a higher
// epoch. Restart the killed primary within the TTL instead, and it resumes
// its session and its term (the resume token it saved under -dir): the same
// epoch, and nobody else led meanwhile. Freeze it (kill -STOP, then kill
// -CONT after the takeover, even the moment the successor prints that it
// leads): its lease runs out by its own clock, it steps down, and neither
// its serve loop nor the late write it then attempts under its old epoch is
// admitted by the file. Ctrl-C resigns at once and hands over without
// waiting for the TTL.
//
// With -keep-term, SIGTERM (and Ctrl-C) is a restart instead, as in a
// rolling deploy that brings the process back within the TTL: the process
// does not resign; it closes its replica (which hands the raft leadership
// over, so the group does not wait an election timeout), keeps the resume
// token under -dir and exits. Started again within the TTL, it resumes its
// session and its term with the same epoch, and nobody else led meanwhile;
// not started again, the next candidate takes over once the TTL has run out.
//
// Every line starts with the time; -log-level info shows the group's own
// log too (raft leader changes among it).
//
// State lives under -dir; restart a process with the same flags to rejoin.
// Remove the directory to start from scratch.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencefile"
)

const electionName = "primary"

type options struct {
	id       uint64
	peers    map[uint64]string
	dir      string
	resource string
	ttl      time.Duration
	every    time.Duration
	keepTerm bool // SIGTERM keeps the term for a restart within the TTL
	logLevel slog.Level
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "election:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "election:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("election", flag.ContinueOnError)
	id := fs.Uint64("id", 0, "this replica's ID, one of the -peers IDs (required)")
	peers := fs.String("peers", "1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103", "the replicas: id=host:port,...")
	dir := fs.String("dir", filepath.Join(os.TempDir(), "fencelock-election"), "state directory, shared by the processes of one machine")
	resource := fs.String("resource", "", "the shared fenced file (default <dir>/resource.log)")
	ttl := fs.Duration("ttl", 2*time.Second, "session TTL: how long a crashed primary keeps the role")
	every := fs.Duration("every", 250*time.Millisecond, "how often the primary writes")
	keep := fs.Bool("keep-term", false, "on SIGTERM keep the session and the term for a restart within -ttl, instead of resigning")
	o := options{logLevel: slog.LevelWarn}
	fs.TextVar(&o.logLevel, "log-level", o.logLevel, "the group's log: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	o.id, o.dir, o.resource, o.ttl, o.every, o.peers = *id, *dir, *resource, *ttl, *every, map[uint64]string{}
	o.keepTerm = *keep
	for _, p := range strings.Split(*peers, ",") {
		k, addr, ok := strings.Cut(strings.TrimSpace(p), "=")
		n, err := strconv.ParseUint(k, 10, 64)
		if !ok || err != nil || n == 0 || addr == "" {
			return options{}, fmt.Errorf("bad -peers entry %q: want id=host:port", p)
		}
		o.peers[n] = addr
	}
	if _, ok := o.peers[o.id]; !ok {
		return options{}, fmt.Errorf("-id %d is not one of -peers", o.id)
	}
	if o.resource == "" {
		o.resource = filepath.Join(o.dir, "resource.log")
	}
	if o.every <= 0 {
		return options{}, errors.New("-every must be positive")
	}
	return o, nil
}

func run(ctx context.Context, o options) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: o.logLevel}))
	node, err := fencelock.Start(ctx, fencelock.Config{
		ReplicaID:  o.id,
		Members:    o.peers,
		Dir:        filepath.Join(o.dir, fmt.Sprintf("replica-%d", o.id)),
		SessionTTL: o.ttl,
		Logger:     logger,
	})
	if err != nil {
		return err
	}
	defer node.Close()
	res, err := fencefile.Open(o.resource)
	if err != nil {
		return err
	}
	say("replica %d: started, campaigning for %q", o.id, electionName)

	// The resume token of the session this process last led with: if it
	// restarts within the TTL, it takes that session and its term back.
	resumeFile := filepath.Join(o.dir, fmt.Sprintf("replica-%d.resume", o.id))
	saved, _ := loadResume(resumeFile)
	// With -keep-term the signal does not end the election, which would
	// resign: it closes the node, which hands the raft leadership over and
	// ends this process's sessions here without ending them at the group.
	electCtx, restarting := ctx, atomic.Bool{}
	if o.keepTerm {
		var cancel context.CancelFunc
		electCtx, cancel = context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-ctx.Done():
				restarting.Store(true)
				node.Close()
			case <-electCtx.Done():
			}
		}()
	}
	// The current or last term: only the callbacks touch them, one at a time.
	var (
		epoch uint64
		term  context.Context // the term's context: it carries the grant
		lead  *fencelock.Leadership
	)
	err = node.RunElection(electCtx, electionName, fmt.Sprintf("replica %d", o.id), fencelock.ElectionCallbacks{
		OnStartedLeading: func(ctx context.Context, l *fencelock.Leadership) {
			if err := saveResume(resumeFile, l.Session().Resume()); err != nil {
				say("replica %d: cannot save the resume token: %v", o.id, err)
			}
			epoch, term, lead = l.Token(), ctx, l
			say("primary: replica %d, epoch %d", o.id, epoch)
			// Claim at grant: from here on the file refuses every earlier
			// epoch's writes, whether or not this primary ever writes.
			// ClaimGrant re-checks the term under the file's lock, so a
			// term already over claims nothing.
			if err := res.ClaimGrant(ctx, l.Fence()); err != nil {
				// Stale: a later primary already reached the file; or the
				// term is over; or the file failed. Returning resigns.
				say("claim refused: replica %d, epoch %d: %v", o.id, epoch, err)
				return
			}
			serve(ctx, o, l, res)
		},
		OnStoppedLeading: func(err error) {
			if err == nil {
				return // resigned: the work returned, or this process is stopping
			}
			if restarting.Load() {
				return // closed for a restart: the term goes on at the group
			}
			say("stepped down: replica %d, epoch %d: %v", o.id, epoch, err)
			// A real primary stops here. To show that a write attempted
			// after the term ended is safe when it goes through the term's
			// context, write once more under the old epoch: AppendGrant
			// refuses it, by the file's fence if a successor has claimed,
			// else by this process's own check of the term.
			if err := res.AppendGrant(term, lead.Fence(), []byte(fmt.Sprintf("replica %d epoch %d late write", o.id, epoch))); err != nil {
				say("late write: replica %d, epoch %d: refused: %v", o.id, epoch, err)
			} else {
				say("late write: replica %d, epoch %d: admitted (a bug: the term is over)", o.id, epoch)
			}
		},
		OnNewLeader: func(info fencelock.LeaderInfo) {
			if info.Token == 0 {
				say("leader: none")
				return
			}
			say("leader: %s, epoch %d", info.Value, info.Token)
		},
	}, fencelock.WithTTL(o.ttl), fencelock.WithResume(saved))
	if restarting.Load() {
		say("replica %d: stopped for a restart; the term is kept for %v", o.id, o.ttl)
		return nil
	}
	if ctx.Err() == nil {
		return err
	}
	os.Remove(resumeFile) // resigned and closed: nothing to resume
	say("replica %d: bye", o.id)
	return nil
}

// serve writes a record under the epoch every o.every until the term ends
// (ctx, the term's context) or the file shows it is over.
//
// The select alone cannot stop a late write: a process that wakes from a
// pause past its term's end finds both cases ready and may pick the tick.
// What stops it is AppendGrant, which re-checks the term through ctx by this
// process's clock, under the file's lock, immediately before writing.
func serve(ctx context.Context, o options, l *fencelock.Leadership, res *fencefile.File) {
	tick := time.NewTicker(o.every)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// l.Fence() is read at each write: it carries the group's ID.
		err := res.AppendGrant(ctx, l.Fence(), []byte(fmt.Sprintf("replica %d epoch %d record %d", o.id, l.Token(), n)))
		if err == nil {
			continue
		}
		if errors.Is(err, fencelock.ErrStaleToken) || errors.Is(err, fencelock.ErrOtherGroup) || ctx.Err() != nil {
			// A later primary has reached the file, or this process's own
			// clock says the term is over (ctx.Err re-checks the grant):
			// stop, whatever the select believed. Returning resigns.
			say("refused: replica %d, epoch %d: %v", o.id, l.Token(), err)
			return
		}
		say("write failed: replica %d, epoch %d: %v", o.id, l.Token(), err)
	}
}

// loadResume reads a saved resume token; the zero token if there is none.
func loadResume(path string) (fencelock.ResumeToken, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return fencelock.ResumeToken{}, err
	}
	return fencelock.ParseResumeToken(strings.TrimSpace(string(b)))
}

// saveResume writes the token where only this user can read it: it is a
// credential for the session.
func saveResume(path string, t fencelock.ResumeToken) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(t.String()+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func say(format string, args ...any) {
	fmt.Printf(time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
}
