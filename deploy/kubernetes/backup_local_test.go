package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestBackupRestoreLocal runs the day-two command lines as the manifests
// write them, against a real `fencelock serve` (no cluster is available to
// the tests): the server's tokens file is fencelock-tokens.yaml's template
// with test tokens in place of the placeholders, so the rights checked are
// the template's own.
//
//   - The metrics token may read /metrics and nothing the others need;
//     the backup token may take a backup and do nothing else.
//   - The CronJob's snapshot container, its args expanded as the kubelet
//     does (JOB_NAME from the Job's label) and rewritten as
//     TestRollingUpdateLocal rewrites them (pod addresses to loopback
//     ports, mount paths to local directories, the token volume holding
//     its one key), saves a backup that holds the lock taken before it,
//     trying the replicas in turn: two are unreachable here.
//   - The pruning container's command, run by the local sh, keeps the
//     newest KEEP backups and nothing else is touched.
//   - Each restore Job's command, with the README's sed applied, seeds an
//     empty Dir from that backup.
func TestBackupRestoreLocal(t *testing.T) {
	m := load(t)
	b := loadFile(t, backupFile)
	r := loadFile(t, restoreFile)
	sts := m.sts
	headless := m.service(t, sts.Spec.ServiceName)
	secret := m.secrets[0]
	start, replicas := int(sts.Spec.Ordinals.Start), int(*sts.Spec.Replicas)

	// The Secret as its volume would hold it, with a test token per key.
	tokens := map[string]string{} // placeholder -> test token
	secretData := map[string]string{}
	for k := range secret.StringData {
		if k != "tokens" {
			secretData[k] = "test-" + k + "-token"
			tokens[placeholder(k)] = secretData[k]
		}
	}
	var file strings.Builder
	for ph, grants := range tokenLines(t, secret) {
		tok, ok := tokens[ph]
		if !ok {
			tok = "test-" + strings.ToLower(ph)
			tokens[ph] = tok
		}
		fmt.Fprintf(&file, "%s %s\n", tok, strings.Join(grants, " "))
	}
	secretData["tokens"] = file.String()

	bin := buildFencelock(t)
	root := t.TempDir()
	tokensFile := filepath.Join(root, "tokens")
	if err := os.WriteFile(tokensFile, []byte(secretData["tokens"]), 0o600); err != nil {
		t.Fatal(err)
	}

	// The old deployment: one replica serves the group whose backup the
	// jobs take. Pod N's addresses: replica N's API is unreachable but for
	// the last one's, which is this replica's; raft addresses are free
	// loopback ports.
	local := map[int]map[int32]string{} // ordinal -> Service port -> 127.0.0.1:P
	var pairs []string
	for i := start; i < start+replicas; i++ {
		local[i] = map[int32]string{}
		host := fmt.Sprintf("%s-%d.%s", sts.Name, i, headless.Name)
		for _, sp := range headless.Spec.Ports {
			local[i][sp.Port] = freePort(t) // nothing listens there
			pairs = append(pairs, fmt.Sprintf("%s:%d", host, sp.Port), local[i][sp.Port])
		}
	}
	hosts := strings.NewReplacer(pairs...)
	httpAddr := local[start+replicas-1][servicePort(t, headless, "http")]
	old := startServe(t, "the old deployment", bin, root, "--id=1", "--peers=1="+freePort(t),
		"--dir="+filepath.Join(root, "serve"), "--http="+httpAddr, "--tokens-file="+tokensFile)
	base := "http://" + httpAddr
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	call := func(token, method, path string, body any, out any) int {
		t.Helper()
		var rd io.Reader
		if body != nil {
			data, _ := json.Marshal(body)
			rd = bytes.NewReader(data)
		}
		req, err := http.NewRequest(method, base+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if out != nil && json.Unmarshal(data, out) != nil {
			t.Fatalf("%s %s: %d %q", method, path, resp.StatusCode, data)
		}
		return resp.StatusCode
	}
	old.waitReady(t, base)

	// The rights of the template's lines, as the server reads them.
	metricsTok, backupTok := tokens[placeholder("metrics")], tokens[placeholder("backup")]
	for _, c := range []struct {
		who, token, method, path string
		want                     int
	}{
		{"metrics", metricsTok, "GET", "/metrics", http.StatusOK},
		{"metrics", metricsTok, "GET", "/v1/snapshot", http.StatusForbidden},
		{"metrics", metricsTok, "POST", "/v1/sessions", http.StatusForbidden},
		{"metrics", metricsTok, "GET", "/v1/locks/jobs%2Fnightly", http.StatusForbidden},
		{"backup", backupTok, "POST", "/v1/sessions", http.StatusForbidden},
		{"backup", backupTok, "GET", "/v1/locks/jobs%2Fnightly", http.StatusForbidden},
	} {
		var body any
		if c.method == "POST" {
			body = map[string]any{"ttl_ms": 15000}
		}
		if got := call(c.token, c.method, c.path, body, nil); got != c.want {
			t.Errorf("the %s token: %s %s answered %d, want %d", c.who, c.method, c.path, got, c.want)
		}
	}

	// A lock held when the backup is taken.
	client := tokens["CLIENT-TOKEN"]
	var sess struct {
		ID     string `json:"session_id"`
		Secret string `json:"session_secret"`
	}
	if code := call(client, "POST", "/v1/sessions", map[string]any{"ttl_ms": 15000, "name": "backup-test"}, &sess); code != http.StatusCreated {
		t.Fatalf("create session: %d", code)
	}
	var grant struct {
		Granted bool   `json:"granted"`
		Token   string `json:"fencing_token"`
	}
	req, _ := http.NewRequest("POST", base+"/v1/locks/jobs%2Fnightly/acquire",
		strings.NewReader(`{"session_id":"`+sess.ID+`","wait":false}`))
	req.Header.Set("Authorization", "Bearer "+client)
	req.Header.Set("Fencelock-Session-Secret", sess.Secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&grant)
	resp.Body.Close()
	if err != nil || !grant.Granted {
		t.Fatalf("acquire jobs/nightly: %d %+v %v", resp.StatusCode, grant, err)
	}

	backups := filepath.Join(root, "pvc-"+b.pvcs[0].Name)
	if err := os.Mkdir(backups, 0o700); err != nil {
		t.Fatal(err)
	}

	// The backup.
	pod := b.cronJobs[0].Spec.JobTemplate.Spec.Template.Spec
	jobName := b.cronJobs[0].Name + "-29412345"
	out, err := runContainer(t, bin, pod, pod.InitContainers[0], hosts, backups, secretData, map[string]string{
		"metadata.labels['batch.kubernetes.io/job-name']": jobName,
	}, nil)
	if err != nil {
		t.Fatalf("the backup: %v\n%s", err, out)
	}
	saved := filepath.Join(backups, jobName+".flb")
	if _, err := os.Stat(saved); err != nil {
		t.Fatalf("the backup wrote no %s: %v\n%s", saved, err, out)
	}
	info, err := exec.Command(bin, "snapshot", "info", "-o", "json", saved).CombinedOutput()
	var bi struct {
		Groups []struct{ Locks, LastToken uint64 }
	}
	if err != nil || json.Unmarshal(info, &bi) != nil || len(bi.Groups) == 0 {
		t.Fatalf("snapshot info %s: %v\n%s", saved, err, info)
	}
	if tok, _ := strconv.ParseUint(grant.Token, 10, 64); bi.Groups[0].Locks != 1 || bi.Groups[0].LastToken < tok {
		t.Errorf("the backup holds %+v: want the lock granted with token %s", bi.Groups[0], grant.Token)
	}

	// The pruning: KEEP newest backups, older ones and other files
	// untouched.
	prune := pod.Containers[0]
	keep := -1
	for _, e := range prune.Env {
		if e.Name == "KEEP" {
			keep, _ = strconv.Atoi(e.Value)
		}
	}
	if keep < 1 {
		t.Fatalf("the pruning container's KEEP is %d", keep)
	}
	now := time.Now()
	var older []string
	for n := range keep + 2 {
		f := filepath.Join(backups, fmt.Sprintf("%s-%d.flb", b.cronJobs[0].Name, 29400000+n))
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		// Older by the hour, the last written the oldest.
		if err := os.Chtimes(f, now, now.Add(-time.Duration(n+1)*time.Hour)); err != nil {
			t.Fatal(err)
		}
		older = append(older, f)
	}
	others := []string{saved + ".partial", filepath.Join(backups, "notes.txt")}
	for _, f := range others {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := exec.LookPath(prune.Command[0]); err != nil {
		t.Fatalf("the pruning runs %s, which this machine lacks: %v", prune.Command[0], err)
	}
	if out, err := runContainer(t, "", pod, prune, hosts, backups, secretData, nil, nil); err != nil {
		t.Fatalf("the pruning: %v\n%s", err, out)
	}
	wantKept := append(append([]string{saved}, older[:keep-1]...), others...)
	slices.Sort(wantKept)
	var kept []string
	ents, _ := os.ReadDir(backups)
	for _, e := range ents {
		kept = append(kept, filepath.Join(backups, e.Name()))
	}
	if !slices.Equal(kept, wantKept) {
		t.Errorf("after the pruning the backups volume holds\n%q\nwant\n%q", kept, wantKept)
	}

	// The restores, one per replica, into empty Dirs, once the old
	// deployment is gone for good (the README's step 1).
	old.stop(t)
	for _, j := range r.jobs {
		jpod := j.Spec.Template.Spec
		c := jpod.Containers[0]
		// The README's sed, on the file as applied.
		sed := func(s string) string { return strings.ReplaceAll(s, "REPLACE-WITH-BACKUP.flb", jobName+".flb") }
		out, err := runContainer(t, bin, jpod, c, hosts, backups, secretData, nil, sed)
		if err != nil {
			t.Fatalf("Job %s: %v\n%s", j.Name, err, out)
		}
		if !strings.Contains(out, "restored replica") {
			t.Errorf("Job %s: %s", j.Name, out)
		}
		t.Logf("Job %s: %s", j.Name, strings.SplitN(out, "\n", 2)[0])
	}

	// The new group: each pod as fencelock.yaml serves it, on the PVC its
	// Job restored (the README's step 3), started at once. It holds the
	// lock the backup holds, for the same session, with the same token.
	c := container(t, sts)
	mounts := map[string]string{} // the volumes but the PVC, shared here
	for _, vm := range c.VolumeMounts {
		dir := filepath.Join(root, "new-"+vm.Name)
		mounts[strings.TrimSuffix(vm.MountPath, "/")] = dir
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if vm.Name == sts.Spec.VolumeClaimTemplates[0].Name {
			continue // each pod's own PVC, below
		}
		if volume(t, "StatefulSet", sts.Spec.Template.Spec, vm.Name).Secret != nil {
			for k, val := range secretData {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(val), 0o400); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	pods := map[int]*serveProc{}
	for i := start; i < start+replicas; i++ {
		pod := fmt.Sprintf("%s-%d", sts.Name, i)
		podMounts := maps.Clone(mounts)
		for _, vm := range c.VolumeMounts {
			if vm.Name == sts.Spec.VolumeClaimTemplates[0].Name {
				podMounts[strings.TrimSuffix(vm.MountPath, "/")] = filepath.Join(root, "pvc-"+vm.Name+"-"+pod)
			}
		}
		ports := map[int32]string{}
		for _, p := range c.Ports {
			ports[p.ContainerPort] = local[i][p.ContainerPort]
		}
		var args []string
		for k, v := range servedAs(t, m, i) {
			args = append(args, "--"+k+"="+rewrite(hosts, ports, podMounts, v))
		}
		slices.Sort(args)
		pods[i] = startServe(t, pod, bin, root, args...)
	}
	for i := start; i < start+replicas; i++ {
		pods[i].waitReady(t, "http://"+local[i][servicePort(t, headless, "http")])
	}
	var lk struct {
		Held    bool   `json:"held"`
		Session string `json:"holder_session"`
		Token   string `json:"fencing_token"`
	}
	if code := call(client, "GET", "/v1/locks/jobs%2Fnightly", nil, &lk); code != http.StatusOK ||
		!lk.Held || lk.Session != sess.ID || lk.Token != grant.Token {
		t.Errorf("the restored group: jobs/nightly %d %+v, want held by %s with token %s", code, lk, sess.ID, grant.Token)
	}
}

// serveProc is a `fencelock serve` process the test started.
type serveProc struct {
	name   string
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan struct{}
}

// startServe starts `fencelock serve` with args; the test's cleanup stops
// it (SIGTERM) and, if the test failed, logs its output.
func startServe(t *testing.T, name, bin, home string, args ...string) *serveProc {
	t.Helper()
	p := &serveProc{name: name, logs: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Logf("%s runs serve %q", name, args)
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.logs)
		}
	})
	return p
}

// stop sends SIGTERM and waits for the exit (a kill after 30 s).
func (p *serveProc) stop(t *testing.T) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("%s did not exit within 30s of SIGTERM", p.name)
	}
}

// waitReady polls base's /readyz until it answers 200, failing the test
// if the process exits first or a minute passes.
func (p *serveProc) waitReady(t *testing.T, base string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := hc.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited before it was ready\n%s", p.name, p.logs)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within a minute (%v)\n%s", p.name, err, p.logs)
		}
	}
}

// runContainer runs container c of pod as the kubelet would, with bin in
// place of the image's binary (or c's own command when bin is ""): env and
// $(VAR)s expanded (fields: the downward API's values by field path;
// edit: a change to every env value and arg first, as a sed over the
// manifest), pod addresses through hosts, each volume mount a local
// directory: a PVC's beside backups (pvc-CLAIM; backups is the backups
// PVC's), a Secret's its keys (or items) from secret, any other empty.
func runContainer(t *testing.T, bin string, pod corev1.PodSpec, c corev1.Container, hosts *strings.Replacer,
	backups string, secret map[string]string, fields map[string]string, edit func(string) string) (string, error) {
	t.Helper()
	if edit == nil {
		edit = func(s string) string { return s }
	}
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		v := volume(t, c.Name, pod, vm.Name)
		dir := filepath.Join(filepath.Dir(backups), c.Name+"-"+vm.Name)
		switch {
		case v.PersistentVolumeClaim != nil:
			// One directory per claim: the backups one is backups.
			dir = filepath.Join(filepath.Dir(backups), "pvc-"+v.PersistentVolumeClaim.ClaimName)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		case v.Secret != nil:
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			items := v.Secret.Items
			if len(items) == 0 {
				for k := range secret {
					items = append(items, corev1.KeyToPath{Key: k, Path: k})
				}
			}
			for _, it := range items {
				if err := os.WriteFile(filepath.Join(dir, it.Path), []byte(secret[it.Key]), 0o400); err != nil {
					t.Fatal(err)
				}
			}
		default:
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		mounts[strings.TrimSuffix(vm.MountPath, "/")] = dir
	}
	env := map[string]string{}
	envList := []string{"HOME=" + filepath.Dir(backups), "PATH=/usr/bin:/bin"}
	for _, e := range c.Env {
		v := expand(edit(e.Value), env)
		if e.ValueFrom != nil {
			var ok bool
			if e.ValueFrom.FieldRef != nil {
				v, ok = fields[e.ValueFrom.FieldRef.FieldPath]
			}
			if !ok {
				t.Fatalf("container %s: env %s: a source this test does not stand in for: %+v", c.Name, e.Name, e.ValueFrom)
			}
		}
		env[e.Name] = v
		envList = append(envList, e.Name+"="+rewrite(hosts, nil, mounts, v))
	}
	cmdline := slices.Concat(c.Command, c.Args)
	for i, a := range cmdline {
		a = rewrite(hosts, nil, mounts, expand(edit(a), env))
		// Paths inside a shell command (the pruning's) move too.
		for mp, dir := range mounts {
			a = strings.ReplaceAll(a, " "+mp+"/", " "+dir+"/")
		}
		cmdline[i] = a
	}
	if bin != "" {
		cmdline[0] = bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cmdline[0], cmdline[1:]...)
	cmd.Env = envList
	out, err := cmd.CombinedOutput()
	t.Logf("container %s ran %q", c.Name, cmdline)
	return string(out), err
}
