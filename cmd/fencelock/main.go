// Command fencelock runs a fencelock replica as a service, and is a client of
// its HTTP API (docs/http.md).
//
//	fencelock serve --id 1 --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003 --dir /var/lib/fencelock --http 127.0.0.1:7080
//	fencelock lock [--http URL,URL,...] [--ttl 10s] [--grace 2s] NAME [--] CMD ARGS...
//	fencelock elect [--http URL,URL,...] NAME VALUE [--] CMD ARGS...
//	fencelock status | locks [PREFIX] | sessions   [--http URL,URL,...] [-o json]
//	fencelock members [--group NAME] | members add --id N --addr HOST:PORT [--voting] | members remove ID | members replace OLD NEW
//	fencelock groups [list] | groups create NAME ID,ID,... | groups drop NAME [--force] | groups set-voters NAME ID,ID,...
//	fencelock version [-o json]
//
// The client commands take --http (or FENCELOCK_HTTP) as a list of replicas
// and fail over to the next when one does not answer. lock and elect run CMD
// only while the lock (or leadership) is held, with its fencing token in
// FENCELOCK_TOKEN and its fence (GROUP:TOKEN) in FENCELOCK_FENCE. CMD gets
// SIGTERM --grace before the holder's lease ends (timed on the boot clock)
// and its process group SIGKILL when it ends, before the group could grant
// the lock to another. They exit with CMD's status (128+N if a signal N
// ended it), or 1 if CMD never ran.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

const usage = `usage:
  fencelock serve --id N --peers ID=HOST:PORT,... --dir DIR [--group NAME=ID,ID,...]... [--http ADDR] [flags]
  fencelock serve --join --id N --addr HOST:PORT --dir DIR [flags]   (or --id-file F: an ID not in --peers joins)
  fencelock lock [--http URL,...] [--ttl D] [--grace D] NAME [--] CMD [ARGS...]
  fencelock elect [--http URL,...] [--ttl D] [--grace D] NAME VALUE [--] CMD [ARGS...]
  fencelock status [--http URL,...] [-o json]
  fencelock locks [--http URL,...] [-o json] [PREFIX]
  fencelock sessions [--http URL,...] [-o json]
  fencelock members [--http URL,...] [--group NAME] [-o json]
  fencelock members add --id N --addr HOST:PORT [--voting] [--http URL,...]
  fencelock members remove ID [--http URL,...]
  fencelock members replace OLD NEW [--http URL,...]   (every group moves off OLD onto NEW, then OLD is removed)
  fencelock groups [list] [--http URL,...] [-o json]
  fencelock groups create NAME ID,ID,... [--http URL,...]
  fencelock groups drop NAME [--force] [--http URL,...]
  fencelock groups set-voters NAME ID,ID,... [--http URL,...]
  fencelock version [-o json]
  fencelock snapshot save [--http URL,...] FILE | snapshot restore FILE --dir DIR --id N --peers ... | snapshot info FILE

--http (env FENCELOCK_HTTP) lists the replicas' API URLs, comma-separated.

Run "fencelock COMMAND -h" for a command's flags.
`

// exitError carries an exit status out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"serve": serve, "lock": lockCmd, "elect": electCmd,
		"status": statusCmd, "locks": locksCmd, "sessions": sessionsCmd,
		"members": membersCmd, "groups": groupsCmd, "version": versionCmd,
		"snapshot": snapshotCmd, // snapshot.go
	}
	cmd, ok := cmds[os.Args[1]]
	if !ok {
		if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
			fmt.Print(usage)
			return
		}
		fmt.Fprintf(os.Stderr, "fencelock: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	err := cmd(os.Args[2:])
	var ee exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	default:
		// The library's errors start with "fencelock: " already.
		fmt.Fprintln(os.Stderr, "fencelock: "+strings.TrimPrefix(err.Error(), "fencelock: "))
		os.Exit(1)
	}
}

// newFlags returns a flag set that reports errors rather than exiting, so
// that every command's mistakes go through main's one exit path.
func newFlags(name, args string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: fencelock %s %s\n", name, args)
		fs.PrintDefaults()
	}
	return fs
}
