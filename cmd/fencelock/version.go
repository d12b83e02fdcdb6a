package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
)

// versionCmd prints what this binary is: the fencelock version and commit
// it was built from, and the newest log and snapshot formats it reads,
// which decide whether it can join a group whose other replicas run
// another build (a group writes what all its members read). It asks no replica: `fencelock status` shows what each
// running replica reports.
func versionCmd(args []string) error {
	fs := newFlags("version", "[-o text|json]")
	output := fs.String("o", "text", "output: text or json")
	rest, err := parseAll(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("version: unexpected argument %q (version takes only -o)", rest[0])
	}
	if *output, err = checkOutput("version", *output); err != nil {
		return err
	}
	return printVersion(os.Stdout, fencelock.BuildVersion(), *output)
}

// printVersion writes v as text (one fact a line) or as the JSON of GET
// /v1/status's version.
func printVersion(w io.Writer, v fencelock.Version, output string) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(httpapi.NewVersionJSON(v), "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "text", "":
	default:
		return fmt.Errorf("version: -o must be text or json, not %q", output)
	}
	commit := v.Commit
	if commit == "" {
		commit = "unknown"
	}
	_, err := fmt.Fprintf(w, "fencelock %s\ncommit:          %s\nlog format:      reads 1 to %d\nsnapshot format: reads 1 to %d\n"+
		"writes:          what each group's members all read (fencelock status, WRITES)\ngo:              %s %s/%s\n",
		v.Version, commit, v.Codec, v.Snapshot, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
