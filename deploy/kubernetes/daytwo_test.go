package kubernetes

import (
	"fmt"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The day-two files, each applied on its own beside fencelock.yaml.
const (
	monitoringFile = "fencelock-monitoring.yaml"
	backupFile     = "fencelock-backup.yaml"
	restoreFile    = "fencelock-restore.yaml"
)

// loadFile decodes one day-two file strictly, as decode does fencelock.yaml.
func loadFile(t *testing.T, name string) manifests {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var m manifests
	if err := m.decode(data); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if m.sts != nil || m.pdb != nil || len(m.services) != 0 || len(m.secrets) != 0 {
		t.Fatalf("%s holds an object of fencelock.yaml or fencelock-tokens.yaml: applying it would change the group", name)
	}
	return m
}

// The day-two files decode strictly too: the Prometheus Operator's types
// and batch/v1's refuse a misspelt or misplaced field.
func TestDayTwoDecodeIsStrict(t *testing.T) {
	for _, c := range []struct{ file, name, from, to string }{
		{monitoringFile, "misspelt ServiceMonitor field", "scrapeTimeout: 10s", "scrapeTimout: 10s"},
		{monitoringFile, "bearer token at the endpoint's level", "      authorization:\n", "      bearerToken: x\n      authorization:\n"},
		{monitoringFile, "endpoint field at the spec's level", "  endpoints:\n", "  port: http\n  endpoints:\n"},
		{backupFile, "misspelt CronJob field", "concurrencyPolicy: Forbid", "concurencyPolicy: Forbid"},
		{backupFile, "pod field in the Job spec", "      backoffLimit: 2\n", "      backoffLimit: 2\n      restartPolicy: Never\n"},
		{restoreFile, "wrong type", "  backoffLimit: 2\n", "  backoffLimit: two\n"},
	} {
		data, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		var good manifests
		if err := good.decode(data); err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		bad := strings.Replace(string(data), c.from, c.to, 1)
		if bad == string(data) {
			t.Fatalf("%s: %q not found in %s", c.name, c.from, c.file)
		}
		var m manifests
		if err := m.decode([]byte(bad)); err == nil {
			t.Errorf("%s: %s decoded without error", c.file, c.name)
		}
	}
}

// tokenLines returns the tokens Secret's template lines, `# REPLACE: TOKEN
// RIGHT:PREFIX ...`, by placeholder token: what each token may do.
func tokenLines(t *testing.T, s *corev1.Secret) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, l := range strings.Split(s.StringData["tokens"], "\n") {
		l, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#")), "REPLACE:")
		if !ok {
			continue
		}
		f := strings.Fields(l)
		if len(f) == 0 {
			t.Fatalf("%s: an empty REPLACE line", secretFile)
		}
		out[f[0]] = f[1:]
	}
	return out
}

// placeholder is the template's token for the Secret's key holding it
// alone: key metrics, METRICS-TOKEN.
func placeholder(key string) string { return strings.ToUpper(key) + "-TOKEN" }

// varRef is a $(VAR) reference the kubelet expands in command, args and env.
var varRef = regexp.MustCompile(`\$\(([^)]*)\)`)

// checkVarRefs fails on a $(NAME) in c's command or args that c's env does
// not define: the kubelet passes it on as written (`$(date +%F)` in a
// file name would be that text, every night the same file), and a
// distroless image has no shell to expand it either.
func checkVarRefs(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	defined := map[string]bool{}
	for _, e := range c.Env {
		defined[e.Name] = true
	}
	for _, a := range slices.Concat(c.Command, c.Args) {
		for _, m := range varRef.FindAllStringSubmatch(strings.ReplaceAll(a, "$$", ""), -1) {
			if !defined[m[1]] {
				t.Errorf("%s: container %s: %q refers to $(%s), which its env does not define", where, c.Name, a, m[1])
			}
		}
	}
}

// checkLikeReplicas fails unless pod runs as the StatefulSet's pods do: the
// same pod and container securityContext (the files it writes belong to
// the replicas' user), no service account token, and labels that none of
// fencelock.yaml's selectors takes for a replica's.
func checkLikeReplicas(t *testing.T, where string, m manifests, pod corev1.PodTemplateSpec) {
	t.Helper()
	sts := m.sts.Spec.Template
	if !reflect.DeepEqual(pod.Spec.SecurityContext, sts.Spec.SecurityContext) {
		t.Errorf("%s: pod securityContext %+v, want the StatefulSet's %+v", where, pod.Spec.SecurityContext, sts.Spec.SecurityContext)
	}
	want := container(t, m.sts).SecurityContext
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if !reflect.DeepEqual(c.SecurityContext, want) {
			t.Errorf("%s: container %s securityContext %+v, want the StatefulSet's", where, c.Name, c.SecurityContext)
		}
		checkVarRefs(t, where, c)
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("%s: automountServiceAccountToken is not false", where)
	}
	set := labels.Set(pod.Labels)
	selects := map[string]*metav1.LabelSelector{
		"StatefulSet " + m.sts.Name:         m.sts.Spec.Selector,
		"PodDisruptionBudget " + m.pdb.Name: m.pdb.Spec.Selector,
		"NetworkPolicy " + m.netpol.Name:    &m.netpol.Spec.PodSelector,
	}
	for _, s := range m.services {
		selects["Service "+s.Name] = &metav1.LabelSelector{MatchLabels: s.Spec.Selector}
	}
	for what, ls := range selects {
		if sel, err := metav1.LabelSelectorAsSelector(ls); err != nil || sel.Matches(set) {
			t.Errorf("%s: the %s selects its pods %v as a replica's (%v)", where, what, pod.Labels, err)
		}
	}
}

// mountOf returns the mount of c whose path holds file, and the file's
// path inside that volume.
func mountOf(t *testing.T, where string, c corev1.Container, file string) (corev1.VolumeMount, string) {
	t.Helper()
	var best corev1.VolumeMount
	for _, vm := range c.VolumeMounts {
		mp := strings.TrimSuffix(vm.MountPath, "/")
		if strings.HasPrefix(file, mp+"/") && len(mp) > len(best.MountPath) {
			best = vm
		}
	}
	if best.Name == "" {
		t.Fatalf("%s: %s is on no volume of container %s", where, file, c.Name)
	}
	return best, strings.TrimPrefix(file, strings.TrimSuffix(best.MountPath, "/")+"/")
}

func volume(t *testing.T, where string, pod corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("%s: no volume %q", where, name)
	return corev1.Volume{}
}

// cliFlags splits a fencelock command line after its two command words
// into --flag=value pairs (each once) and operands.
func cliFlags(t *testing.T, where string, args []string) (map[string]string, []string) {
	t.Helper()
	f := map[string]string{}
	var operands []string
	for _, a := range args[2:] {
		if !strings.HasPrefix(a, "-") {
			operands = append(operands, a)
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("%s: arg %q: want --flag=value", where, a)
		}
		if _, dup := f[k]; dup {
			t.Fatalf("%s: --%s given twice", where, k)
		}
		f[k] = v
	}
	return f, operands
}

// Prometheus scrapes every replica with a token that can do no more than
// it needs: the ServiceMonitor selects the headless Service alone (every
// pod, ready or not, once), names a port it has, and takes its bearer
// token from a key of the tokens Secret whose template line grants one
// read right on a prefix, not every right; its NetworkPolicy opens the
// HTTP port, never the raft port.
func TestServiceMonitor(t *testing.T) {
	m := load(t)
	mon := loadFile(t, monitoringFile)
	if len(mon.serviceMonitors) != 1 || len(mon.cronJobs)+len(mon.jobs)+len(mon.pvcs) != 0 {
		t.Fatalf("%s: want one ServiceMonitor (and a NetworkPolicy)", monitoringFile)
	}
	sm := mon.serviceMonitors[0]
	if len(sm.Spec.NamespaceSelector.MatchNames) != 0 || sm.Spec.NamespaceSelector.Any {
		t.Errorf("ServiceMonitor %s looks beyond its namespace: %+v", sm.Name, sm.Spec.NamespaceSelector)
	}
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Fatalf("ServiceMonitor %s: selector %v (%v)", sm.Name, sm.Spec.Selector, err)
	}
	var selected []string
	for _, s := range m.services {
		if sel.Matches(labels.Set(s.Labels)) {
			selected = append(selected, s.Name)
		}
	}
	headless := m.service(t, m.sts.Spec.ServiceName)
	if len(selected) != 1 || selected[0] != headless.Name {
		t.Fatalf("ServiceMonitor %s selects Services %v: want the headless %s alone (every pod once, ready or not)", sm.Name, selected, headless.Name)
	}
	c := container(t, m.sts)
	secret := m.secrets[0]
	lines := tokenLines(t, secret)
	if len(sm.Spec.Endpoints) == 0 {
		t.Fatalf("ServiceMonitor %s has no endpoint", sm.Name)
	}
	for i, ep := range sm.Spec.Endpoints {
		where := fmt.Sprintf("ServiceMonitor %s endpoint %d", sm.Name, i)
		var target *intstr.IntOrString
		for _, p := range headless.Spec.Ports {
			if p.Name == ep.Port {
				target = &p.TargetPort
			}
		}
		if target == nil {
			t.Errorf("%s: port %q is not a port of Service %s", where, ep.Port, headless.Name)
		} else if portNumber(t, c, *target) != containerPort(t, c, "http") {
			t.Errorf("%s: port %q reaches container port %d, not the API's", where, ep.Port, portNumber(t, c, *target))
		}
		if ep.Path != "" && ep.Path != "/metrics" {
			t.Errorf("%s: path %q, want /metrics", where, ep.Path)
		}
		if ep.BearerTokenFile != "" || ep.BasicAuth != nil || ep.OAuth2 != nil {
			t.Errorf("%s: authenticates otherwise than with authorization", where)
		}
		a := ep.Authorization
		if a == nil || !strings.EqualFold(a.Type, "Bearer") || a.Credentials == nil {
			t.Fatalf("%s: want authorization type Bearer with credentials from a Secret, got %+v", where, a)
		}
		if a.Credentials.Name != secret.Name {
			t.Errorf("%s: token from Secret %q, want %s (fencelock-tokens.yaml)", where, a.Credentials.Name, secret.Name)
		}
		key := a.Credentials.Key
		if _, ok := secret.StringData[key]; !ok {
			t.Fatalf("%s: Secret %s has no key %q", where, secret.Name, key)
		}
		grants, ok := lines[placeholder(key)]
		if !ok {
			t.Fatalf("%s: the tokens template has no line for %s", secretFile, placeholder(key))
		}
		// /metrics takes any valid token; a line with a token alone has
		// every right, so the least is one read right on a prefix.
		if len(grants) != 1 || !strings.HasPrefix(grants[0], "read:") || grants[0] == "read:*" {
			t.Errorf("%s: %s %v: want one read right on a prefix (least privilege: /metrics takes any valid token)", secretFile, placeholder(key), grants)
		}
		if ep.Interval != "" && ep.ScrapeTimeout != "" {
			iv, err1 := time.ParseDuration(string(ep.Interval))
			to, err2 := time.ParseDuration(string(ep.ScrapeTimeout))
			if err1 != nil || err2 != nil || to > iv {
				t.Errorf("%s: scrapeTimeout %s, interval %s: want a timeout within the interval", where, ep.ScrapeTimeout, ep.Interval)
			}
		}
	}
	// The README's `kubectl create secret` writes the same line.
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"metrics", "backup"} {
		if !strings.Contains(string(readme), "--from-literal="+key+"=") ||
			!strings.Contains(string(readme), "$"+strings.ToUpper(key)+" "+strings.Join(lines[placeholder(key)], " ")+"\n") {
			t.Errorf("README.md: its kubectl create secret does not give key %s and its line %q", key, lines[placeholder(key)])
		}
	}

	// The monitoring NetworkPolicy: the group's pods, the HTTP port alone.
	np := mon.netpol
	if np == nil {
		t.Fatalf("%s: no NetworkPolicy: Prometheus in another namespace could not reach the pods", monitoringFile)
	}
	psel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || psel.Empty() || !psel.Matches(labels.Set(m.sts.Spec.Template.Labels)) {
		t.Errorf("NetworkPolicy %s does not select the StatefulSet's pods", np.Name)
	}
	for i, r := range np.Spec.Ingress {
		if admits(r, c, "raft") {
			t.Errorf("NetworkPolicy %s rule %d opens the raft port", np.Name, i)
		}
		if !admits(r, c, "http") {
			t.Errorf("NetworkPolicy %s rule %d does not open the http port", np.Name, i)
		}
	}
}

// The backup CronJob runs `fencelock snapshot save` of the StatefulSet's
// image against every replica's API, with a token file that is the
// Secret's `backup` key alone (admin on *, the right GET /v1/snapshot
// needs, and nothing else), into the backups PVC; never two at once, a
// bounded history, and a file name the kubelet can expand.
func TestBackupCronJob(t *testing.T) {
	m := load(t)
	b := loadFile(t, backupFile)
	if len(b.cronJobs) != 1 || len(b.pvcs) != 1 || len(b.jobs)+len(b.serviceMonitors) != 0 || b.netpol != nil {
		t.Fatalf("%s: want a CronJob and its PVC", backupFile)
	}
	cj, pvc := b.cronJobs[0], b.pvcs[0]
	if cj.Spec.ConcurrencyPolicy != "Forbid" {
		t.Errorf("concurrencyPolicy %q: want Forbid (two backups at once copy every group twice)", cj.Spec.ConcurrencyPolicy)
	}
	for what, n := range map[string]*int32{"successfulJobsHistoryLimit": cj.Spec.SuccessfulJobsHistoryLimit, "failedJobsHistoryLimit": cj.Spec.FailedJobsHistoryLimit} {
		if n == nil || *n < 1 || *n > 10 {
			t.Errorf("%s %v: want a limit of 1 to 10", what, n)
		}
	}
	pod := cj.Spec.JobTemplate.Spec.Template
	checkLikeReplicas(t, "CronJob "+cj.Name, m, pod)
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q: want Never (a failed backup is retried as a new pod, backoffLimit)", pod.Spec.RestartPolicy)
	}
	// The snapshot runs first, the pruning only after it succeeded.
	if len(pod.Spec.InitContainers) != 1 || len(pod.Spec.Containers) != 1 {
		t.Fatalf("want the snapshot as the init container and one pruning container")
	}
	sc, rc := pod.Spec.InitContainers[0], container(t, m.sts)
	if sc.Image != rc.Image || !slices.Equal(sc.Command, rc.Command) {
		t.Errorf("snapshot container runs %s %q, want the StatefulSet's %s %q", sc.Image, sc.Command, rc.Image, rc.Command)
	}
	if len(sc.Args) < 3 || sc.Args[0] != "snapshot" || sc.Args[1] != "save" {
		t.Fatalf("snapshot container args %q: want snapshot save", sc.Args)
	}
	f, files := cliFlags(t, "snapshot save", sc.Args)
	for k := range f {
		if k != "http" && k != "token-file" {
			t.Errorf("snapshot save --%s: want --http and --token-file alone", k)
		}
	}
	// --http: every replica's API, as --http-peers names them.
	var want []string
	for _, u := range parseIDMap(t, flags(t, rc)["http-peers"]) {
		want = append(want, u)
	}
	got := strings.Split(f["http"], ",")
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("snapshot save --http=%s: want every replica's API %v", f["http"], want)
	}

	// --token-file: the Secret's backup key alone, read-only.
	where := "CronJob " + cj.Name
	vm, rel := mountOf(t, where, sc, f["token-file"])
	v := volume(t, where, pod.Spec, vm.Name)
	secret := m.secrets[0]
	if !vm.ReadOnly || v.Secret == nil || v.Secret.SecretName != secret.Name {
		t.Fatalf("--token-file=%s: want it from Secret %s mounted read-only, got %+v %+v", f["token-file"], secret.Name, vm, v.VolumeSource)
	}
	var key string
	for _, it := range v.Secret.Items {
		if it.Path == rel {
			key = it.Key
		}
	}
	if key == "" || len(v.Secret.Items) != 1 {
		t.Fatalf("--token-file=%s: want the volume to hold that one key, got items %+v", f["token-file"], v.Secret.Items)
	}
	if _, ok := secret.StringData[key]; !ok {
		t.Fatalf("Secret %s has no key %q", secret.Name, key)
	}
	if g := tokenLines(t, secret)[placeholder(key)]; !slices.Equal(g, []string{"admin:*"}) {
		t.Errorf("%s: %s %v: want admin:* alone, what GET /v1/snapshot needs", secretFile, placeholder(key), g)
	}

	// FILE: on the backups PVC, named by the Job.
	if len(files) != 1 {
		t.Fatalf("snapshot save: want one FILE, got %q", files)
	}
	vm, _ = mountOf(t, where, sc, files[0])
	v = volume(t, where, pod.Spec, vm.Name)
	if vm.ReadOnly || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("FILE %s: want it on the PVC %s, writable, got %+v", files[0], pvc.Name, v.VolumeSource)
	}
	if !strings.Contains(files[0], "$(") {
		t.Errorf("FILE %s: every backup would overwrite the last", files[0])
	}
	prune := pod.Spec.Containers[0]
	if pvm, _ := mountOf(t, where, prune, path.Dir(files[0])+"/x"); pvm.Name != vm.Name {
		t.Errorf("the pruning container does not see the backups volume at %s", path.Dir(files[0]))
	}
	if strings.HasSuffix(prune.Image, ":latest") || !strings.Contains(prune.Image, ":") {
		t.Errorf("pruning image %q: want a version", prune.Image)
	}

	// The replicas' NetworkPolicy lets the backup pod reach their API.
	reach := false
	for _, r := range m.netpol.Spec.Ingress {
		if !admits(r, rc, "http") {
			continue
		}
		for _, p := range r.From {
			if p.PodSelector != nil && p.NamespaceSelector == nil && p.IPBlock == nil {
				s, err := metav1.LabelSelectorAsSelector(p.PodSelector)
				reach = reach || (err == nil && s.Matches(labels.Set(pod.Labels)))
			}
		}
		reach = reach || len(r.From) == 0
	}
	if !reach {
		t.Errorf("NetworkPolicy %s does not admit the backup pods %v to the http port", m.netpol.Name, pod.Labels)
	}
}

// servedAs returns the StatefulSet's serve flags as pod ordinal i runs
// them: $(POD_NAME) and $(FENCELOCK_ID), the downward API's, filled in.
func servedAs(t *testing.T, m manifests, i int) map[string]string {
	t.Helper()
	c := container(t, m.sts)
	fill := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil || e.ValueFrom.FieldRef == nil:
		case e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			fill[e.Name] = fmt.Sprintf("%s-%d", m.sts.Name, i)
		case e.ValueFrom.FieldRef.FieldPath == "metadata.labels['apps.kubernetes.io/pod-index']":
			fill[e.Name] = fmt.Sprint(i)
		}
	}
	out := map[string]string{}
	for k, v := range flags(t, c) {
		out[k] = expand(v, fill)
	}
	return out
}

// restoreFlags are the flags `snapshot restore` shares with serve: each
// must be what serve runs the replica with (docs/operations.md: "seed its
// Dir with the flags it will be served with").
var restoreFlags = []string{"id", "peers", "addr", "dir", "group", "placement", "raft-listen"}

// The restore manifests seed every replica of the StatefulSet: for each
// ordinal a PVC as its claim template would make it, under the name the
// StatefulSet adopts, and a Job that runs `fencelock snapshot restore` of
// the StatefulSet's image into it with the flags that pod is served with,
// from the backups PVC mounted read-only, as the replicas' user.
func TestRestoreJobs(t *testing.T) {
	m := load(t)
	b := loadFile(t, backupFile)
	r := loadFile(t, restoreFile)
	if len(r.cronJobs)+len(r.serviceMonitors) != 0 || r.netpol != nil {
		t.Fatalf("%s: want PVCs and Jobs alone", restoreFile)
	}
	sts, rc := m.sts, container(t, m.sts)
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	var dataMount corev1.VolumeMount
	for _, vm := range rc.VolumeMounts {
		if vm.Name == tmpl.Name {
			dataMount = vm
		}
	}
	backups := b.pvcs[0].Name
	start, n := int(sts.Spec.Ordinals.Start), int(*sts.Spec.Replicas)
	if len(r.pvcs) != n || len(r.jobs) != n {
		t.Fatalf("%s: %d PVCs and %d Jobs, want one of each per replica (%d)", restoreFile, len(r.pvcs), len(r.jobs), n)
	}
	for i := start; i < start+n; i++ {
		claim := fmt.Sprintf("%s-%s-%d", tmpl.Name, sts.Name, i)
		found := false
		for _, pvc := range r.pvcs {
			if pvc.Name == claim {
				found = true
				if !reflect.DeepEqual(pvc.Spec, tmpl.Spec) {
					t.Errorf("PVC %s: spec %+v, want the claim template's %+v", claim, pvc.Spec, tmpl.Spec)
				}
			}
		}
		if !found {
			t.Errorf("%s: no PVC %s for pod %s-%d", restoreFile, claim, sts.Name, i)
		}
		var jobs []string
		for _, j := range r.jobs {
			pod := j.Spec.Template.Spec
			for _, v := range pod.Volumes {
				if v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != claim {
					continue
				}
				jobs = append(jobs, j.Name)
				where := "Job " + j.Name
				checkLikeReplicas(t, where, m, j.Spec.Template)
				if len(pod.InitContainers) != 0 || len(pod.Containers) != 1 {
					t.Fatalf("%s: want one container", where)
				}
				c := pod.Containers[0]
				if c.Image != rc.Image || !slices.Equal(c.Command, rc.Command) {
					t.Errorf("%s runs %s %q, want the StatefulSet's %s %q", where, c.Image, c.Command, rc.Image, rc.Command)
				}
				if len(c.Args) < 3 || c.Args[0] != "snapshot" || c.Args[1] != "restore" {
					t.Fatalf("%s: args %q: want snapshot restore", where, c.Args)
				}
				f, files := cliFlags(t, where, c.Args)
				env := map[string]string{}
				for _, e := range c.Env {
					env[e.Name] = e.Value
				}
				served := servedAs(t, m, i)
				for k := range f {
					if !slices.Contains(restoreFlags, k) {
						t.Errorf("%s: --%s is not a flag restore shares with serve", where, k)
					}
				}
				for _, k := range restoreFlags {
					if got := expand(f[k], env); got != served[k] && !(k == "raft-listen" && got == "") {
						t.Errorf("%s: --%s=%q, but pod %s-%d is served with %q", where, k, got, sts.Name, i, served[k])
					}
				}
				if vm, _ := mountOf(t, where, c, expand(f["dir"], env)); vm.Name != v.Name || vm.MountPath != dataMount.MountPath || vm.ReadOnly {
					t.Errorf("%s: --dir=%s is not where the pod mounts its PVC (%s at %s)", where, f["dir"], v.Name, dataMount.MountPath)
				}
				if len(files) != 1 {
					t.Fatalf("%s: want one FILE, got %q", where, files)
				}
				vm, _ := mountOf(t, where, c, files[0])
				bv := volume(t, where, pod, vm.Name)
				if !vm.ReadOnly || bv.PersistentVolumeClaim == nil || bv.PersistentVolumeClaim.ClaimName != backups {
					t.Errorf("%s: FILE %s: want it from the PVC %s mounted read-only, got %+v", where, files[0], backups, bv.VolumeSource)
				}
			}
		}
		if len(jobs) != 1 {
			t.Errorf("pod %s-%d: Jobs %v restore into %s, want one", sts.Name, i, jobs, claim)
		}
	}
}

// scrapeConfig mirrors the fields of a Prometheus scrape_configs entry
// that README.md's job without the operator uses: Prometheus' own config
// types are not worth their module here, and the strict decode still
// refuses a field this struct does not have.
type scrapeConfig struct {
	ScrapeConfigs []struct {
		JobName             string `json:"job_name"`
		KubernetesSDConfigs []struct {
			Role       string `json:"role"`
			Namespaces struct {
				Names []string `json:"names"`
			} `json:"namespaces"`
		} `json:"kubernetes_sd_configs"`
		Authorization struct {
			CredentialsFile string `json:"credentials_file"`
		} `json:"authorization"`
		RelabelConfigs []struct {
			SourceLabels []string `json:"source_labels"`
			Regex        string   `json:"regex"`
			Action       string   `json:"action"`
		} `json:"relabel_configs"`
	} `json:"scrape_configs"`
}

// README.md's scrape job for Prometheus without the operator keeps the
// same targets as the ServiceMonitor (the headless Service's http port,
// not fencelock-api's) and reads the token from the Secret's metrics key.
func TestScrapeConfigSnippet(t *testing.T) {
	m := load(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```yaml\n(scrape_configs:.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md: no ```yaml block of scrape_configs")
	}
	var sc scrapeConfig
	if err := yaml.UnmarshalStrict(block[1], &sc); err != nil {
		t.Fatalf("README.md's scrape_configs: %v", err)
	}
	if len(sc.ScrapeConfigs) != 1 {
		t.Fatalf("README.md: want one scrape job, got %d", len(sc.ScrapeConfigs))
	}
	job := sc.ScrapeConfigs[0]
	if len(job.KubernetesSDConfigs) != 1 || job.KubernetesSDConfigs[0].Role != "endpoints" {
		t.Fatalf("scrape job %s: want one kubernetes_sd_configs of role endpoints", job.JobName)
	}
	if _, ok := m.secrets[0].StringData[path.Base(job.Authorization.CredentialsFile)]; path.Base(job.Authorization.CredentialsFile) != "metrics" || !ok {
		t.Errorf("scrape job %s: credentials_file %q: want the Secret's key metrics, mounted", job.JobName, job.Authorization.CredentialsFile)
	}
	// The targets it keeps, as Prometheus' endpoints discovery labels them.
	sanitize := regexp.MustCompile(`[^a-zA-Z0-9_]`)
	target := func(s *corev1.Service, port string) map[string]string {
		l := map[string]string{"__meta_kubernetes_endpoint_port_name": port}
		for k, v := range s.Labels {
			l["__meta_kubernetes_service_label_"+sanitize.ReplaceAllString(k, "_")] = v
		}
		return l
	}
	kept := func(l map[string]string) bool {
		for _, rc := range job.RelabelConfigs {
			if rc.Action != "keep" {
				t.Fatalf("scrape job %s: a relabel action %q this test does not follow", job.JobName, rc.Action)
			}
			var vals []string
			for _, s := range rc.SourceLabels {
				vals = append(vals, l[s])
			}
			if !regexp.MustCompile("^(?:" + rc.Regex + ")$").MatchString(strings.Join(vals, ";")) {
				return false
			}
		}
		return len(job.RelabelConfigs) > 0
	}
	headless := m.service(t, m.sts.Spec.ServiceName)
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			want := s.Name == headless.Name && p.Name == "http"
			if got := kept(target(s, p.Name)); got != want {
				t.Errorf("scrape job %s keeps Service %s port %s: %v, want %v", job.JobName, s.Name, p.Name, got, want)
			}
		}
	}
}
