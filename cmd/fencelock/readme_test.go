package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// walkthroughMarker precedes the README's service walkthrough block.
const walkthroughMarker = "<!-- walkthrough:"

// readmeWalkthrough returns the lines of the sh block that follows the
// marker in README.md.
func readmeWalkthrough(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), walkthroughMarker)
	require.True(t, ok, "README.md has no %q marker", walkthroughMarker)
	_, rest, ok = strings.Cut(rest, "```sh\n")
	require.True(t, ok, "no sh block after the walkthrough marker")
	block, _, ok := strings.Cut(rest, "\n```")
	require.True(t, ok, "the walkthrough block does not end")
	return strings.Split(block, "\n")
}

// portsFree reports whether every port is free on loopback.
func portsFree(ports []int) bool {
	for _, p := range ports {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// walkPorts returns the README's ports with the prefix ("70" in 7001 and
// 7081), and a free prefix to use in their place if they are taken (two
// runs at once on one machine, say): the block writes every address as
// 127.0.0.1:70.., so the prefix is all that need change.
func walkPorts(t *testing.T) string {
	t.Helper()
	ports := func(prefix int) []int {
		return []int{prefix*100 + 1, prefix*100 + 2, prefix*100 + 3, prefix*100 + 81, prefix*100 + 82, prefix*100 + 83}
	}
	for prefix := 70; prefix < 100; prefix++ {
		if portsFree(ports(prefix)) {
			return fmt.Sprint(prefix)
		}
	}
	t.Fatal("no free set of walkthrough ports")
	return ""
}

// shell is a bash reading commands one by one, as a user types them.
type shell struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func newShell(t *testing.T, dir string) *shell {
	cmd := exec.Command("bash")
	cmd.Dir = dir
	// Its own process group: the replicas it starts in the background are
	// in it, and the test ends them all if a step fails.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = w, w
	require.NoError(t, cmd.Start())
	w.Close()
	sh := &shell{t: t, cmd: cmd, in: in, lines: make(chan string, 10000)}
	go func() {
		defer close(sh.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			sh.lines <- sc.Text()
		}
		r.Close()
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = in.Close()
		_ = cmd.Wait()
		for range sh.lines { // until every process that held the output is gone
		}
	})
	return sh
}

var doneLine = regexp.MustCompile(`^@@done (\d+)$`)

// run types line and returns what it printed and its status.
func (sh *shell) run(line string, timeout time.Duration) (string, int) {
	sh.t.Helper()
	_, err := fmt.Fprintf(sh.in, "%s\necho \"@@done $?\"\n", line)
	require.NoError(sh.t, err)
	var out strings.Builder
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-sh.lines:
			require.True(sh.t, ok, "the shell ended during %q:\n%s", line, out.String())
			if m := doneLine.FindStringSubmatch(l); m != nil {
				var status int
				fmt.Sscan(m[1], &status)
				return out.String(), status
			}
			out.WriteString(l + "\n")
		case <-deadline:
			sh.t.Fatalf("%q did not finish in %v:\n%s", line, timeout, out.String())
		}
	}
}

// TestReadmeWalkthrough runs the README's service walkthrough as written,
// line by line in bash, against real `fencelock serve` processes, and
// checks what each step shows.
func TestReadmeWalkthrough(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not found, and CI is set", tool)
			}
			t.Skipf("%s not found", tool)
		}
	}
	lines := readmeWalkthrough(t)
	prefix := walkPorts(t)
	if prefix != "70" {
		t.Logf("the README's ports are taken: using %s01-%s83", prefix, prefix)
	}

	// The directory a user would run it in: the clone, with the command
	// built into it.
	dir := t.TempDir()
	require.NoError(t, os.Symlink(binary(t), filepath.Join(dir, "fencelock")))
	examples, err := filepath.Abs("../../examples")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(examples, filepath.Join(dir, "examples")))
	sh := newShell(t, dir)

	// What each step must show, by a piece of its line.
	var session string
	var acquired time.Time
	checks := []struct {
		in    string
		check func(out string)
	}{
		{"./fencelock status", func(out string) { require.Contains(t, out, "leader") }},
		{"S=$(echo", func(string) {
			out, _ := sh.run(`echo "session=$S secret=${#K}"`, 10*time.Second)
			var n int
			_, err := fmt.Sscanf(out, "session=%s secret=%d", &session, &n)
			require.NoError(t, err, out)
			require.Regexp(t, `^[0-9]+$`, session)
			require.Equal(t, 43, n, "the secret: 256 bits in base64url")
		}},
		{"/acquire", func(out string) {
			require.Contains(t, out, `"granted":true`)
			require.Contains(t, out, `"fence":"`)
			acquired = time.Now()
		}},
		{"./fencelock locks", func(out string) {
			require.Contains(t, out, "jobs/report")
			require.Contains(t, out, session)
		}},
		{"./fencelock lock jobs/nightly", func(out string) {
			m := regexp.MustCompile(`nightly job runs with fence (\S*)`).FindStringSubmatch(out)
			require.NotNil(t, m, out)
			_, err := fencelock.ParseFence(m[1])
			require.NoError(t, err, "FENCELOCK_FENCE")
		}},
		{"fencelock_client.py", func(out string) {
			require.Contains(t, out, `"fencing_token"`)
			b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
			require.NoError(t, err)
			require.Contains(t, string(b), "written by session")
		}},
		{"./fencelock sessions", func(out string) { require.Contains(t, out, session) }},
		// The admin commands work in the walkthrough's deployment (serve
		// --dev), as etcd's and Consul's dev setups allow at once.
		{"groups create billing", func(out string) { require.Contains(t, out, "group billing created") }},
		{"snapshot save", func(out string) {
			require.Contains(t, out, "billing")
			_, err := os.Stat(filepath.Join(dir, "backup.flb"))
			require.NoError(t, err)
		}},
		{"kill $(jobs -p)", func(string) {
			_, status := sh.run("wait", time.Minute) // until the replicas have exited on SIGTERM
			require.Equal(t, 0, status)
			for _, port := range []string{"81", "82", "83"} {
				out, status := sh.run("curl -s 127.0.0.1:"+prefix+port+"/healthz", 30*time.Second)
				require.NotEqual(t, 0, status, "a replica still answers after the kill: %s", out)
			}
		}},
	}
	ran := 0
	for _, line := range lines {
		if strings.TrimSpace(line) == "" {
			continue
		}
		line = strings.ReplaceAll(line, "127.0.0.1:70", "127.0.0.1:"+prefix)
		if strings.HasPrefix(line, "kill ") {
			// Before the replicas stop: the lock taken with curl is held
			// past its TTL (10s), for the heartbeat loop renews it.
			if wait := 13*time.Second - time.Since(acquired); wait > 0 {
				time.Sleep(wait) // outliving the TTL is what is checked
			}
			out, _ := sh.run("curl -s 127.0.0.1:"+prefix+"81/v1/locks/jobs%2Freport", 30*time.Second)
			require.Contains(t, out, `"holder_session":"`+session+`"`, "the curl-taken lock outlived its heartbeats")
		}
		t.Logf("$ %s", line)
		out, status := sh.run(line, 2*time.Minute)
		t.Logf("%s", out)
		require.Equal(t, 0, status, "%q failed:\n%s", line, out)
		for _, c := range checks {
			if strings.Contains(line, c.in) {
				c.check(out)
				ran++
			}
		}
	}
	require.Equal(t, len(checks), ran, "a step the test checks is missing from the README")
}
