package checker

import (
	"flag"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// reportDir is -report DIR: when set, every scenario this test process
// runs (TestScenarios' and the restore, and TestSeededBugs' rows) is added
// to the published report, DIR/index.html, rewritten after each one so
// that a run stopped midway leaves what it did.
var reportDir = flag.String("report", "", "write the checker's HTML report of the runs to this directory")

// published is what this process ran, for the report.
var published struct {
	mu     sync.Mutex
	runs   []PageRun
	seeded []SeededRow
}

// seededBuild says the test binary has the fencelock_seeded tag
// (seeded_test.go sets it), for the report's command.
var seededBuild bool

// publishRun adds a scenario's run to the report (Err: it did not run to
// its checks).
func publishRun(t *testing.T, r Report, err error) {
	if *reportDir == "" {
		return
	}
	run := PageRun{Report: r}
	if err != nil {
		run.Err = err.Error()
	}
	published.mu.Lock()
	published.runs = append(published.runs, run)
	published.mu.Unlock()
	writePublished(t)
}

// publishSeeded adds a seeded bug's row to the report.
func publishSeeded(t *testing.T, row SeededRow) {
	if *reportDir == "" {
		return
	}
	published.mu.Lock()
	published.seeded = append(published.seeded, row)
	published.mu.Unlock()
	writePublished(t)
}

func writePublished(t *testing.T) {
	published.mu.Lock()
	p := Page{Command: reproduce(), Generated: time.Now(),
		Runs: append([]PageRun(nil), published.runs...), Seeded: append([]SeededRow(nil), published.seeded...)}
	published.mu.Unlock()
	path, err := WritePage(*reportDir, p)
	if err != nil {
		t.Errorf("report: %v", err)
		return
	}
	t.Logf("report: %s", path)
}

// reproduce is the command that runs what this process ran: its test
// flags as go test takes them, and the checker's environment.
func reproduce() string {
	var b strings.Builder
	for _, env := range []string{"FENCELOCK_SOAK", "FENCELOCK_SEEDED_ONLY"} {
		if v := os.Getenv(env); v != "" {
			b.WriteString(env + "=" + v + " ")
		}
	}
	b.WriteString("go test")
	if raceEnabled {
		b.WriteString(" -race")
	}
	if seededBuild {
		b.WriteString(" -tags fencelock_seeded")
	}
	b.WriteString(" ./checker/")
	for _, a := range os.Args[1:] {
		a, ok := strings.CutPrefix(a, "-test.")
		switch {
		case !ok:
			b.WriteString(" " + shellQuote(a))
		case strings.HasPrefix(a, "run="), strings.HasPrefix(a, "count="), strings.HasPrefix(a, "timeout="):
			b.WriteString(" " + shellQuote("-"+a))
		}
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell if it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,@+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
