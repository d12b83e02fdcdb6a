package checker

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// dumpDir is where a failing scenario writes what a reader needs:
// FENCELOCK_CHECKER_DUMP if set (CI sets it, and keeps the folder), else
// fencelock-checker in the temporary directory. It outlives the test's own
// temporary directories on purpose.
func dumpDir() string {
	if d := os.Getenv("FENCELOCK_CHECKER_DUMP"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "fencelock-checker")
}

// dumps are the files a scenario wrote for its violations.
type dumps struct {
	scenario string
	log      *appliedLog

	mu         sync.Mutex
	paths      []string
	stackDumps int
}

// fileFor returns a path for what the scenario writes about name, with ext.
func (d *dumps) fileFor(name, ext string) string {
	safe := strings.NewReplacer("/", "_", ":", "_", "@", "_at_").Replace(name)
	d.mu.Lock()
	n := len(d.paths)
	d.mu.Unlock()
	return filepath.Join(dumpDir(), fmt.Sprintf("%s-%d-%s.%s", d.scenario, n, safe, ext))
}

func (d *dumps) write(path string, body []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	if os.WriteFile(path, body, 0o644) == nil {
		d.mu.Lock()
		d.paths = append(d.paths, path)
		d.mu.Unlock()
	}
}

// history is checkLinearizable's dump: porcupine's HTML visualisation of
// the partition (how far the search got, and the states it reached), and
// a text file with the history in call order and the group's applied
// commands that concern the lock, over the entries of its grants.
func (d *dumps) history(model porcupine.NondeterministicModel) func(string, []porcupine.Operation, porcupine.LinearizationInfo) {
	return func(name string, part []porcupine.Operation, info porcupine.LinearizationInfo) {
		html := d.fileFor(name, "html")
		if err := os.MkdirAll(filepath.Dir(html), 0o755); err == nil &&
			porcupine.VisualizePath(model.ToModel(), info, html) == nil {
			d.mu.Lock()
			d.paths = append(d.paths, html)
			d.mu.Unlock()
		}
		ops := make([]Op, len(part))
		var tokens []uint64
		for i, p := range part {
			ops[i] = p.Input.(Op)
			if ops[i].Token != 0 {
				tokens = append(tokens, ops[i].Token)
			}
		}
		sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
		var b strings.Builder
		fmt.Fprintf(&b, "history of %q in call order: call..return client kind shared permits session token phantom id outcome holders value resolved\n", name)
		for _, op := range ops {
			fmt.Fprintf(&b, "%d..%d c%d %v sh=%v p=%d s%d t%d ph%d id%d %v %v %q resolved=%v\n", op.Call, op.Return, op.Client, op.Kind,
				op.Shared, op.Permits, op.Session, op.Token, op.Phantom, op.ID, op.Outcome, op.Holders, op.Value, op.Resolved)
		}
		if d.log != nil {
			b.WriteString("\n")
			b.WriteString(d.log.around(groupOf(name), name, tokens...))
		}
		d.write(d.fileFor(name, "txt"), []byte(b.String()))
	}
}

// grants writes the group's applied commands around two grants of name,
// for a violation that names them ("the holder stops first").
func (d *dumps) grants(name string, tokens ...uint64) {
	if d.log == nil {
		return
	}
	d.write(d.fileFor(name, "txt"), []byte(d.log.around(groupOf(name), name, tokens...)))
}

// files returns the paths written so far.
func (d *dumps) files() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.paths...)
}

// maxStackDumps bounds the goroutine dumps of one run: each is megabytes,
// and is kept, not printed (.ci/run prints the .txt files).
const maxStackDumps = 3

// stacks writes every goroutine's stack, under how each replica sees
// group, for a probe of replica id that has not granted since began.
func (d *dumps) stacks(id uint64, group string, began time.Time, views string) {
	d.mu.Lock()
	d.stackDumps++
	over := d.stackDumps > maxStackDumps
	d.mu.Unlock()
	if over {
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "probe of replica %d in group %q, not granted since %s (%v ago)\nthe group as each replica sees it: %s\n\n",
		id, group, began.Format(time.RFC3339Nano), time.Since(began).Round(time.Millisecond), views)
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		return
	}
	d.write(d.fileFor(fmt.Sprintf("probe-r%d-g%s", id, group), "stacks"), b.Bytes())
}
