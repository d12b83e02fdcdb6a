package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestRollingUpdateLocal runs the StatefulSet's container, as fencelock.yaml
// writes it, as three local processes (no cluster is available to the
// tests) and takes them through a rolling update as the StatefulSet
// controller would: highest ordinal first, one pod at a time, each ready
// again before the next. A lock taken before the update stays held by the
// same session with the same fencing token throughout.
//
// What the kubelet and the cluster would provide is stood in for:
//   - $(VAR) references in args and env are expanded as the kubelet does,
//     the downward API giving metadata.name = fencelock-N and the pod-index
//     label = N;
//   - rewritten, and only these: the command's path (the image's
//     /usr/local/bin/fencelock is a binary built from this repository);
//     every HOST:PORT naming a pod under the headless Service
//     (fencelock-N.fencelock:7001 and :7080, in --addr, --peers,
//     --http-peers and the env) and every 0.0.0.0:PORT a container binds
//     (--raft-listen, --http) become 127.0.0.1 and a free port per pod and
//     port, since three local processes cannot share 7001 and 7080 and
//     there is no cluster DNS; every path under a volume mount (--dir on
//     the data claim, --id-file on the fencelock-ids ConfigMap, which is
//     optional and absent here, --tokens-file on the Secret) moves under a
//     per-pod temporary directory, the Secret's keys written there with a
//     test token;
//   - the preStop sleep is not slept: it gives the Services time to stop
//     routing to the pod, which here is the test no longer sending calls
//     to it before SIGTERM; the process must exit within what the grace
//     period leaves after the preStop.
func TestRollingUpdateLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fencelock and runs three replicas")
	}
	m := load(t)
	sts := m.sts
	pod := sts.Spec.Template.Spec
	c := container(t, sts)
	if len(c.Command) != 1 || len(c.Args) == 0 {
		t.Fatalf("command %q args %q: want the binary, then serve's args", c.Command, c.Args)
	}
	headless := m.service(t, sts.Spec.ServiceName)
	replicas := int(*sts.Spec.Replicas)
	start := 0
	if sts.Spec.Ordinals != nil {
		start = int(sts.Spec.Ordinals.Start)
	}
	grace := 30 * time.Second // Kubernetes' default
	if g := pod.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		grace -= time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil {
		t.Fatal("no readinessProbe httpGet")
	}
	readyWithin := time.Duration(rp.FailureThreshold*rp.PeriodSeconds) * time.Second
	probeTimeout := time.Duration(rp.TimeoutSeconds) * time.Second
	probePort := portNumber(t, c, rp.HTTPGet.Port)
	httpPort := containerPort(t, c, "http")

	bin := buildFencelock(t)
	root := t.TempDir()

	// Free loopback ports, one per pod and container port.
	local := map[int]map[int32]string{} // ordinal -> container port -> 127.0.0.1:P
	ords := []int{}
	for i := start; i < start+replicas; i++ {
		ords = append(ords, i)
		local[i] = map[int32]string{}
		for _, p := range c.Ports {
			local[i][p.ContainerPort] = freePort(t)
		}
	}
	// fencelock-N.fencelock:SERVICEPORT -> pod N's local address for the
	// container port the Service port targets.
	var hostPairs []string
	for _, i := range ords {
		host := fmt.Sprintf("%s-%d.%s", sts.Name, i, headless.Name)
		for _, sp := range headless.Spec.Ports {
			cp := portNumber(t, c, sp.TargetPort)
			hostPairs = append(hostPairs, net.JoinHostPort(host, strconv.Itoa(int(sp.Port))), local[i][cp])
		}
	}
	hosts := strings.NewReplacer(hostPairs...)

	// The Secret's keys as its volume would hold them, with test tokens.
	const adminToken, clientToken = "rolling-admin-token", "rolling-client-token"
	secretData := map[string]string{}
	for k := range m.secrets[0].StringData {
		secretData[k] = ""
	}
	secretData["tokens"] = adminToken + " admin:* read:*\n" + clientToken + " lock:jobs/ read:jobs/\n"
	secretData["admin"] = adminToken

	type replica struct {
		ord  int
		args []string
		env  []string
		url  string // the probe's and the API's base URL
		logs *lockedBuffer
		cmd  *exec.Cmd
		done chan struct{}
	}
	reps := map[int]*replica{}
	for _, i := range ords {
		podDir := filepath.Join(root, sts.Name+"-"+strconv.Itoa(i))
		mounts := map[string]string{} // mountPath -> local dir
		for _, vm := range c.VolumeMounts {
			dir := filepath.Join(podDir, "volumes", vm.Name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, v := range pod.Volumes {
				if v.Name == vm.Name && v.Secret != nil {
					for k, val := range secretData {
						if err := os.WriteFile(filepath.Join(dir, k), []byte(val), 0o400); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			mounts[strings.TrimSuffix(vm.MountPath, "/")] = dir
		}
		// The pod's env, $(VAR)s expanded in order as the kubelet does.
		env := map[string]string{}
		var envList []string
		for _, e := range c.Env {
			var v string
			switch {
			case e.ValueFrom == nil:
				v = expand(e.Value, env)
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
				v = fmt.Sprintf("%s-%d", sts.Name, i)
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.labels['apps.kubernetes.io/pod-index']":
				v = strconv.Itoa(i)
			default:
				t.Fatalf("env %s: a source this test does not stand in for: %+v", e.Name, e.ValueFrom)
			}
			env[e.Name] = v
			envList = append(envList, e.Name+"="+rewrite(hosts, local[i], mounts, v))
		}
		envList = append(envList, "HOME="+podDir, "PATH=/usr/bin:/bin")
		args := make([]string, len(c.Args))
		for k, a := range c.Args {
			args[k] = rewrite(hosts, local[i], mounts, expand(a, env))
			if strings.Contains(args[k], "$(") || strings.Contains(args[k], "."+headless.Name+":") ||
				strings.Contains(args[k], "0.0.0.0") || strings.Contains(args[k], "=/etc/") || strings.Contains(args[k], "=/var/") {
				t.Fatalf("pod %d: arg %q (from %q) is left unexpanded or not rewritten", i, args[k], a)
			}
		}
		reps[i] = &replica{ord: i, args: args, env: envList, url: "http://" + local[i][probePort]}
		if local[i][probePort] != local[i][httpPort] {
			t.Fatalf("the readiness probe's port %d is not the API's %d", probePort, httpPort)
		}
	}
	t.Logf("pod %d runs: %s %q", ords[0], bin, reps[ords[0]].args)

	var mu sync.Mutex // guards up, and each replica's cmd/done
	up := map[int]bool{}
	run := func(r *replica) {
		cmd := exec.Command(bin, r.args...)
		cmd.Env = r.env
		r.logs = &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = r.logs, r.logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		mu.Lock()
		r.cmd, r.done = cmd, done
		mu.Unlock()
	}
	// stop sends SIGTERM, waits for the exit within the grace period and
	// fails the test on a non-zero exit.
	stop := func(r *replica) {
		mu.Lock()
		up[r.ord] = false
		cmd, done := r.cmd, r.done
		mu.Unlock()
		if cmd == nil {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		t0 := time.Now()
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("pod %d did not exit within %v of SIGTERM (killed)\n%s", r.ord, grace, r.logs)
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("pod %d exited with %d after SIGTERM\n%s", r.ord, code, r.logs)
		} else {
			t.Logf("pod %d exited 0 in %v", r.ord, time.Since(t0).Round(time.Millisecond))
		}
		mu.Lock()
		r.cmd = nil
		mu.Unlock()
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: probeTimeout}
	waitReady := func(r *replica, within time.Duration) {
		t.Helper()
		t0 := time.Now()
		for {
			resp, err := probe.Get(r.url + rp.HTTPGet.Path)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Logf("pod %d ready after %v", r.ord, time.Since(t0).Round(time.Millisecond))
					mu.Lock()
					up[r.ord] = true
					mu.Unlock()
					return
				}
			}
			select {
			case <-r.done:
				t.Fatalf("pod %d exited before it was ready\n%s", r.ord, r.logs)
			default:
			}
			if time.Since(t0) > within {
				t.Fatalf("pod %d not ready within %v (%v)\n%s", r.ord, within, err, r.logs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Cleanup(func() {
		// Every pod still running stops as a deleted StatefulSet's
		// would: SIGTERM, exit 0 within the grace period.
		for _, i := range ords {
			stop(reps[i])
		}
		if t.Failed() {
			for _, i := range ords {
				if reps[i].logs != nil {
					t.Logf("pod %d log:\n%s", i, reps[i].logs)
				}
			}
		}
	})

	// podManagementPolicy Parallel: every pod starts at once.
	for _, i := range ords {
		run(reps[i])
	}
	for _, i := range ords {
		waitReady(reps[i], 60*time.Second)
	}

	call := func(r *replica, method, path, secret string, body any) (int, map[string]any, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, r.url+path, rd)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+clientToken)
		if secret != "" {
			req.Header.Set("Fencelock-Session-Secret", secret)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		out := map[string]any{}
		data, _ := io.ReadAll(resp.Body)
		if len(data) > 0 {
			if err := json.Unmarshal(data, &out); err != nil {
				return resp.StatusCode, nil, fmt.Errorf("%s %s: %d %q", method, path, resp.StatusCode, data)
			}
		}
		return resp.StatusCode, out, nil
	}

	// A session and a lock, through pod start's API.
	first := reps[ords[0]]
	code, sess, err := call(first, "POST", "/v1/sessions", "", map[string]any{"ttl_ms": 15000, "name": "rolling-test"})
	if err != nil || code != http.StatusCreated {
		t.Fatalf("create session: %d %v %v", code, sess, err)
	}
	sid, secret := sess["session_id"].(string), sess["session_secret"].(string)
	const lockPath = "/v1/locks/jobs%2Frolling"
	code, grant, err := call(first, "POST", lockPath+"/acquire", secret, map[string]any{"session_id": sid, "wait": false})
	if err != nil || code != http.StatusOK || grant["granted"] != true {
		t.Fatalf("acquire: %d %v %v", code, grant, err)
	}
	token := grant["fencing_token"].(string)
	t.Logf("session %s holds jobs/rolling with token %s", sid, token)

	// checkHeld reads the lock on r: held by the session, same token.
	checkHeld := func(r *replica) error {
		code, lk, err := call(r, "GET", lockPath, "", nil)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("GET lock on pod %d: %d %v", r.ord, code, lk)
		}
		if lk["held"] != true || lk["holder_session"] != sid || lk["fencing_token"] != token {
			return fmt.Errorf("pod %d: lock %v, want held by %s with token %s", r.ord, lk, sid, token)
		}
		return nil
	}

	// The session heartbeats through the pods that are up, in turn (any
	// replica serves any session), and reads the lock there.
	stopBeat := make(chan struct{})
	beatDone := make(chan struct{})
	var beatErr []string
	beats := map[int]int{} // heartbeats renewed, by pod; guarded by mu
	totalBeats := func() (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range beats {
			n += b
		}
		return n
	}
	var lastBeat time.Time
	go func() {
		defer close(beatDone)
		lastBeat = time.Now()
		n := 0
		for {
			select {
			case <-stopBeat:
				return
			case <-time.After(time.Second):
			}
			var targets []*replica
			mu.Lock()
			for _, i := range ords {
				if up[i] {
					targets = append(targets, reps[i])
				}
			}
			mu.Unlock()
			for k := range targets {
				r := targets[(n+k)%len(targets)]
				code, hb, err := call(r, "POST", "/v1/sessions/"+sid+"/heartbeat", secret, nil)
				if err != nil || code != http.StatusOK {
					if code == http.StatusNotFound {
						beatErr = append(beatErr, fmt.Sprintf("heartbeat on pod %d: the session is over: %v", r.ord, hb))
						return
					}
					continue // the next pod up
				}
				if gap := time.Since(lastBeat); gap > 10*time.Second {
					beatErr = append(beatErr, fmt.Sprintf("no heartbeat renewed for %v", gap))
				}
				lastBeat = time.Now()
				mu.Lock()
				beats[r.ord]++
				mu.Unlock()
				// A pod that stopped answering (SIGTERM after this
				// round picked it, a leader handover) proves nothing;
				// a lock view that names another holder or token fails.
				if code, lk, err := call(r, "GET", lockPath, "", nil); err == nil && code == http.StatusOK &&
					(lk["held"] != true || lk["holder_session"] != sid || lk["fencing_token"] != token) {
					beatErr = append(beatErr, fmt.Sprintf("pod %d: lock %v, want held by %s with token %s", r.ord, lk, sid, token))
				}
				break
			}
			n++
		}
	}()
	defer func() {
		select {
		case <-stopBeat:
		default:
			close(stopBeat)
		}
		<-beatDone
	}()

	// updateStrategy RollingUpdate: highest ordinal first, one at a time;
	// the controller moves on once every pod is ready again.
	for k := len(ords) - 1; k >= 0; k-- {
		r := reps[ords[k]]
		if code, st, err := call(r, "GET", "/v1/status", "", nil); err == nil && code == http.StatusOK {
			t.Logf("updating pod %d (replica %v; leader %v)", r.ord, st["replica_id"], st["leader_id"])
		}
		stop(r)
		if t.Failed() {
			t.FailNow()
		}
		for _, i := range ords {
			if i != r.ord {
				if err := checkHeld(reps[i]); err != nil {
					t.Errorf("pod %d down: %v", r.ord, err)
				}
			}
		}
		// While it is down (the kubelet would be pulling the new image),
		// the session is renewed through the others.
		deadline := time.Now().Add(30 * time.Second)
		for b := totalBeats(); totalBeats() < b+2; {
			select {
			case <-beatDone:
				t.Fatalf("the heartbeats stopped: %v", beatErr)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no heartbeat renewed in 30s with pod %d down", r.ord)
			}
		}
		run(r) // the same args and the same volume
		waitReady(r, readyWithin)
		for _, i := range ords {
			if err := checkHeld(reps[i]); err != nil {
				t.Errorf("after pod %d's update: %v", r.ord, err)
			}
		}
	}
	// Let a heartbeat or two go through the updated pods.
	time.Sleep(2 * time.Second)
	close(stopBeat)
	<-beatDone
	for _, e := range beatErr {
		t.Error(e)
	}
	t.Logf("heartbeats renewed, by pod: %v", beats)
	for _, i := range ords {
		if beats[i] == 0 {
			t.Errorf("no heartbeat went through pod %d", i)
		}
	}
	for _, i := range ords {
		if err := checkHeld(reps[i]); err != nil {
			t.Errorf("after the rolling update: %v", err)
		}
		select {
		case <-reps[i].done:
			t.Errorf("pod %d exited on its own\n%s", i, reps[i].logs)
		default:
		}
	}
}

// expand replaces $(VAR) with VAR's value when env defines it, leaves an
// unknown reference as written, and turns $$ into $, as the kubelet does
// for a container's args and env values.
func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+end+1])
			}
			i += end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// rewrite maps a --flag=VALUE (or an env value) to this machine: pod
// addresses under the headless Service and 0.0.0.0:PORT binds to the
// pod's loopback ports, paths under a volume mount to the pod's local
// directory for that volume.
func rewrite(hosts *strings.Replacer, ports map[int32]string, mounts map[string]string, s string) string {
	prefix, v := "", s
	if strings.HasPrefix(s, "--") {
		if k, val, ok := strings.Cut(s, "="); ok {
			prefix, v = k+"=", val
		}
	}
	v = hosts.Replace(v)
	if h, p, err := net.SplitHostPort(v); err == nil && h == "0.0.0.0" {
		n, _ := strconv.Atoi(p)
		if a, ok := ports[int32(n)]; ok {
			v = a
		}
	}
	// Once, by the longest mount path that holds it: the local
	// directories are themselves under /tmp, a mount path too.
	best := ""
	for mp := range mounts {
		if (v == mp || strings.HasPrefix(v, mp+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if best != "" {
		v = mounts[best] + strings.TrimPrefix(v, best)
	}
	return prefix + v
}

// portNumber resolves a probe's or a Service's target port (a name or a
// number) to the container's port number.
func portNumber(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	return containerPort(t, c, p.StrVal)
}

// freePort returns 127.0.0.1:PORT, free now, below Linux's ephemeral range
// so that no outgoing connection takes it before the replica binds it, and
// never one it returned before.
func freePort(t *testing.T) string {
	t.Helper()
	for range 1000 {
		p := 10000 + rand.IntN(22000)
		if usedPorts[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
			usedPorts[p] = true
			return l.Addr().String()
		}
	}
	t.Fatal("no free loopback port")
	return ""
}

var usedPorts = map[int]bool{}

// buildFencelock builds cmd/fencelock of the repository this module sits
// in (../..), as the Dockerfile does.
func buildFencelock(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "fencelock")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/fencelock")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fencelock: %v\n%s", err, b)
	}
	return out
}

// lockedBuffer is a process's output, read while the process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
