package main

// What tracing costs, measured in one run (issue 27):
//
//   - -traced runs W1-W3 a second time with every replica's sessions
//     recording spans through the OpenTelemetry SDK, exported in batches to
//     an exporter that counts them, and prints the traced figures over the
//     untraced ones (tracing on versus off);
//   - -before REV[,REV...] builds this command at each git revision in a
//     temporary worktree and runs the same workloads with it, interleaved
//     with this build, and prints this build's figures over each REV's:
//     with REV the last commit before tracing, what tracing costs when it
//     is off (and, with more revisions, which change cost what).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/bench/lockbench"
)

// countingExporter exports spans by counting them: the SDK still builds,
// queues and batches every span, which is the cost an application pays
// before its exporter's own.
type countingExporter struct{ spans atomic.Int64 }

func (e *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.spans.Add(int64(len(spans)))
	return nil
}

func (e *countingExporter) Shutdown(context.Context) error { return nil }

// tracedCluster is a cluster whose replicas share one recording provider;
// Close flushes and shuts it down after the replicas.
type tracedCluster struct {
	*cluster
	tp       *sdktrace.TracerProvider
	exp      *countingExporter
	exported *atomic.Int64
}

func (c *tracedCluster) Close() error {
	err := c.cluster.Close()
	if serr := c.tp.Shutdown(context.Background()); err == nil {
		err = serr
	}
	c.exported.Add(c.exp.spans.Load())
	return err
}

// tracedStarter starts size replicas recording spans; exported counts, per
// cluster started, the spans its exporter received.
func tracedStarter(size int, exported *atomic.Int64) lockbench.Starter {
	return func(ctx context.Context, dir string) (lockbench.Cluster, error) {
		exp := &countingExporter{}
		// A queue large enough that W2's rate does not drop spans: a drop
		// would be work the measurement does not pay.
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(1<<16)))
		c, err := startCluster(ctx, dir, size, func(cfg *fencelock.Config) { cfg.TracerProvider = tp })
		if err != nil {
			_ = tp.Shutdown(ctx)
			return nil, err
		}
		return &tracedCluster{cluster: c, tp: tp, exp: exp, exported: exported}, nil
	}
}

// tracedWorkload says whether -traced and -before measure w.
func tracedWorkload(w string) bool { return strings.HasPrefix(w, "W1") || w == "W2" || w == "W3" }

// buildBefore builds this command at git revision rev, in a worktree under
// root that it removes again; with serve, the fencelock command too.
func buildBefore(rev, root string, i int, serve bool) (*peer, error) {
	wt := filepath.Join(root, fmt.Sprintf("before-src-%d", i))
	if out, err := exec.Command("git", "worktree", "add", "--detach", wt, rev).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("-before %s: git worktree add: %v: %s", rev, err, out)
	}
	defer func() {
		_ = exec.Command("git", "worktree", "remove", "--force", wt).Run()
	}()
	bin := filepath.Join(root, fmt.Sprintf("bench-before-%d", i))
	cmd := exec.Command("go", "build", "-o", bin, "./bench")
	cmd.Dir = wt
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("-before %s: build its bench: %w", rev, err)
	}
	p := &peer{bin: bin, root: root, name: "fencelock@" + rev, dirPrefix: fmt.Sprintf("before-%d", i), rev: rev}
	if serve {
		p.serve = filepath.Join(root, fmt.Sprintf("fencelock-serve-before-%d", i))
		if err := buildServeAt(wt, p.serve); err != nil {
			return nil, fmt.Errorf("-before %s: %w", rev, err)
		}
	}
	return p, nil
}
