package client

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A program that only talks to the service links this package and what it
// imports: the standard library, the leaf (lockapi), the holder's clock and
// x/sys for it. No raft, storage, membership or cgo compression may come in
// through an import of the root package or an internal one that runs a
// group. The list is of modules and packages allowed, so a new import must
// be chosen on purpose. Test-only imports (this package's tests start
// replicas) are not counted: go list -deps without -test leaves them out.
func TestClientLinksNoEngine(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "list", "-deps",
		"-f", "{{if not .Standard}}{{.ImportPath}} {{len .CgoFiles}}{{end}}", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	allowed := map[string]bool{
		"github.com/fencelock/fencelock/client":         true,
		"github.com/fencelock/fencelock/lockapi":        true,
		"github.com/fencelock/fencelock/internal/clock": true,
		"golang.org/x/sys/unix":                         true,
	}
	var extra []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, cgoFiles, _ := strings.Cut(line, " ")
		if !allowed[path] || cgoFiles != "0" {
			extra = append(extra, line)
		}
	}
	require.Empty(t, extra, "packages (import path, cgo files) the client links beyond the leaf")
}
