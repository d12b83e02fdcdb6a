// Package kubernetes holds fencelock's Kubernetes manifests (fencelock.yaml)
// and their test. It is a module of its own so that the library's users do
// not pull in Kubernetes' modules.
package kubernetes

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	manifestFile = "fencelock.yaml"
	// secretFile is the tokens Secret's template, applied once and apart:
	// re-applying fencelock.yaml (an upgrade) must not reset the tokens.
	secretFile = "fencelock-tokens.yaml"
)

// manifests is fencelock.yaml (and fencelock-tokens.yaml) decoded into the
// typed API objects; the day-two files (monitoring, backup, restore) decode
// into the same struct, each on its own (loadFile).
type manifests struct {
	services []*corev1.Service
	sts      *appsv1.StatefulSet
	pdb      *policyv1.PodDisruptionBudget
	netpol   *networkingv1.NetworkPolicy
	secrets  []*corev1.Secret

	serviceMonitors []*monitoringv1.ServiceMonitor
	cronJobs        []*batchv1.CronJob
	jobs            []*batchv1.Job
	pvcs            []*corev1.PersistentVolumeClaim
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decode decodes every document of a manifest file strictly: a field the
// Kubernetes API does not have (a typo, a field at the wrong level), a
// duplicate field or a value of the wrong type is an error, as is a kind
// this deployment does not use.
func decode(data []byte) (manifests, error) {
	var m manifests
	if err := m.decode(data); err != nil {
		return m, err
	}
	if m.sts == nil || m.pdb == nil || m.netpol == nil || len(m.services) == 0 {
		return m, fmt.Errorf("want a StatefulSet, a PodDisruptionBudget, a NetworkPolicy and Services")
	}
	return m, nil
}

// decode adds the documents of data to m, as the function decode does.
func (m *manifests) decode(data []byte) error {
	for i, doc := range docSep.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		obj, ok, err := m.newObject(tm.APIVersion+" "+tm.Kind, i)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("document %d: unexpected %s %s", i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return fmt.Errorf("document %d (%s): %w", i, tm.Kind, err)
		}
	}
	return nil
}

// newObject adds a new, empty object of kind ("apps/v1 StatefulSet") to
// m, for the strict decode of document i to fill; ok is false for a kind
// this deployment does not use.
func (m *manifests) newObject(kind string, i int) (obj any, ok bool, err error) {
	many := map[string]func() any{
		"v1 Service":               func() any { return appendNew(&m.services) },
		"v1 Secret":                func() any { return appendNew(&m.secrets) },
		"batch/v1 CronJob":         func() any { return appendNew(&m.cronJobs) },
		"batch/v1 Job":             func() any { return appendNew(&m.jobs) },
		"v1 PersistentVolumeClaim": func() any { return appendNew(&m.pvcs) },
		// The Prometheus Operator's own Go types: a field the CRD does not
		// have fails here as it would not at kubectl apply without
		// server-side validation.
		"monitoring.coreos.com/v1 ServiceMonitor": func() any { return appendNew(&m.serviceMonitors) },
	}
	one := map[string]func() (any, error){
		"networking.k8s.io/v1 NetworkPolicy": func() (any, error) { return setOnce(&m.netpol, i, "NetworkPolicy") },
		"apps/v1 StatefulSet":                func() (any, error) { return setOnce(&m.sts, i, "StatefulSet") },
		"policy/v1 PodDisruptionBudget":      func() (any, error) { return setOnce(&m.pdb, i, "PodDisruptionBudget") },
	}
	if add, ok := many[kind]; ok {
		return add(), true, nil
	}
	if set, ok := one[kind]; ok {
		obj, err = set()
		return obj, true, err
	}
	return nil, false, nil
}

// appendNew adds a new, empty object to a kind a manifest may hold many of,
// for the strict decode to fill.
func appendNew[T any](list *[]*T) *T {
	obj := new(T)
	*list = append(*list, obj)
	return obj
}

// setOnce sets a kind a manifest holds one of to a new, empty object, for
// the strict decode to fill; a second one (document i) is an error.
func setOnce[T any](one **T, i int, kind string) (*T, error) {
	if *one != nil {
		return nil, fmt.Errorf("document %d: a second %s", i, kind)
	}
	*one = new(T)
	return *one, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func load(t *testing.T) manifests {
	t.Helper()
	data, err := os.ReadFile(manifestFile)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode(data)
	if err != nil {
		t.Fatalf("%s: %v", manifestFile, err)
	}
	if len(m.secrets) != 0 {
		t.Fatalf("%s ships a Secret: re-applying it (an upgrade) would reset the tokens; keep it in %s", manifestFile, secretFile)
	}
	data, err = os.ReadFile(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	only := manifests{}
	if err := only.decode(data); err != nil {
		t.Fatalf("%s: %v", secretFile, err)
	}
	if len(only.secrets) != 1 || only.sts != nil || only.pdb != nil || only.netpol != nil || len(only.services) != 0 {
		t.Fatalf("%s: want the tokens Secret alone", secretFile)
	}
	m.secrets = only.secrets
	return m
}

// The decoder is strict: a misspelt field, a duplicate one, or a value of
// the wrong type in the manifests fails this test rather than being dropped
// (as a lenient decode, and an API server's default, would do).
func TestDecodeIsStrict(t *testing.T) {
	data, err := os.ReadFile(manifestFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decode(data); err != nil {
		t.Fatalf("%s: %v", manifestFile, err)
	}
	for _, c := range []struct{ name, from, to string }{
		{"misspelt field", "podManagementPolicy: Parallel", "podManagmentPolicy: Parallel"},
		{"field at the wrong level", "  serviceName: fencelock\n", "  serviceName: fencelock\n  clusterIP: None\n"},
		{"duplicate field", "  replicas: 3\n", "  replicas: 3\n  replicas: 5\n"},
		{"wrong type", "  replicas: 3\n", "  replicas: three\n"},
		{"unknown kind", "kind: PodDisruptionBudget", "kind: PodDisruptionBudgets"},
	} {
		bad := bytes.Replace(data, []byte(c.from), []byte(c.to), 1)
		if bytes.Equal(bad, data) {
			t.Fatalf("%s: %q not found in %s", c.name, c.from, manifestFile)
		}
		if _, err := decode(bad); err == nil {
			t.Errorf("%s: decoded without error", c.name)
		}
	}
}

func (m manifests) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %q", name)
	return nil
}

func servicePort(t *testing.T, s *corev1.Service, name string) int32 {
	t.Helper()
	for _, p := range s.Spec.Ports {
		if p.Name == name {
			return p.Port
		}
	}
	t.Fatalf("Service %s has no port %q", s.Name, name)
	return 0
}

func container(t *testing.T, sts *appsv1.StatefulSet) corev1.Container {
	t.Helper()
	cs := sts.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("want one container, got %d", len(cs))
	}
	return cs[0]
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container has no port %q", name)
	return 0
}

// flags returns the container's `fencelock serve` flags, with $(VAR)
// references expanded from its env as the kubelet does.
func flags(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %q: want `serve` first", c.Args)
	}
	out := map[string]string{}
	for _, a := range c.Args[1:] {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("arg %q: want --flag=value", a)
		}
		out[k] = ref.ReplaceAllStringFunc(v, func(r string) string {
			if v, ok := env[r[2:len(r)-1]]; ok {
				return v
			}
			return r // from the downward API: checked by the caller
		})
	}
	return out
}

// parseIDMap parses "1=a,2=b" as `fencelock serve` does.
func parseIDMap(t *testing.T, s string) map[uint64]string {
	t.Helper()
	m := map[uint64]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		id, err := strconv.ParseUint(k, 10, 64)
		if !ok || err != nil || id == 0 || v == "" {
			t.Fatalf("%q is not ID=ADDRESS", kv)
		}
		m[id] = v
	}
	return m
}

// The StatefulSet starts its pods in parallel with stable names and one
// volume each, its pods are the ones the headless Service names, and its
// replicas' flags agree with both.
func TestStatefulSetAndServices(t *testing.T) {
	m := load(t)
	sts, pod := m.sts, m.sts.Spec.Template
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: want Parallel (a new group becomes ready only with a quorum up)", sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Fatalf("replicas %v: want 3", sts.Spec.Replicas)
	}
	replicas := int(*sts.Spec.Replicas)
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
		t.Fatalf("the StatefulSet's selector %v does not select its pods %v (%v)", sts.Spec.Selector, pod.Labels, err)
	}

	// The headless Service gives the pods their DNS names, before they
	// are ready.
	headless := m.service(t, sts.Spec.ServiceName)
	if headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s: clusterIP %q, want None (headless)", headless.Name, headless.Spec.ClusterIP)
	}
	if !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: publishNotReadyAddresses must be true: peers must find a replica before it is ready", headless.Name)
	}
	for _, s := range m.services {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			t.Errorf("Service %s selects %v, not the StatefulSet's pods %v", s.Name, s.Spec.Selector, pod.Labels)
		}
	}

	// One PVC per pod, mounted where --dir points.
	if n := len(sts.Spec.VolumeClaimTemplates); n != 1 {
		t.Fatalf("%d volumeClaimTemplates: want one", n)
	}
	pvc := sts.Spec.VolumeClaimTemplates[0]
	c := container(t, sts)
	f := flags(t, c)
	mounted := false
	for _, vm := range c.VolumeMounts {
		if vm.Name == pvc.Name && strings.HasPrefix(f["dir"]+"/", strings.TrimSuffix(vm.MountPath, "/")+"/") {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("--dir=%s is not on the volume %q", f["dir"], pvc.Name)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == pvc.Name {
			t.Errorf("pod volume %q hides the claim template", v.Name)
		}
	}

	// The replica ID is the pod's index, and the indices are the IDs in
	// --peers: 1 to replicas.
	start := 0
	if sts.Spec.Ordinals != nil {
		start = int(sts.Spec.Ordinals.Start)
	}
	if start < 1 {
		t.Fatalf("ordinals start at %d: replica IDs start at 1", start)
	}
	var idFrom string
	for _, e := range c.Env {
		if "$("+e.Name+")" == f["id"] && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			idFrom = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if idFrom != "metadata.labels['apps.kubernetes.io/pod-index']" {
		t.Errorf("--id=%s: want it from the pod-index label, got %q", f["id"], idFrom)
	}

	// --peers names each pod under the headless Service at the raft port,
	// which the container exposes and --raft-listen binds.
	raftPort := servicePort(t, headless, "raft")
	if p := containerPort(t, c, "raft"); p != raftPort {
		t.Errorf("container raft port %d, Service's %d", p, raftPort)
	}
	if _, port, err := net.SplitHostPort(f["raft-listen"]); err != nil || port != strconv.Itoa(int(raftPort)) {
		t.Errorf("--raft-listen=%s: want the raft port %d", f["raft-listen"], raftPort)
	}
	peers := parseIDMap(t, f["peers"])
	httpPeers := parseIDMap(t, f["http-peers"])
	httpPort := containerPort(t, c, "http")
	if len(peers) != replicas || len(httpPeers) != replicas {
		t.Errorf("--peers has %d replicas, --http-peers %d: want %d", len(peers), len(httpPeers), replicas)
	}
	for i := start; i < start+replicas; i++ {
		host := fmt.Sprintf("%s-%d.%s", sts.Name, i, headless.Name)
		if want := net.JoinHostPort(host, strconv.Itoa(int(raftPort))); peers[uint64(i)] != want {
			t.Errorf("--peers: replica %d is %q, want %q (pod %s-%d under Service %s)", i, peers[uint64(i)], want, sts.Name, i, headless.Name)
		}
		if want := fmt.Sprintf("http://%s:%d", host, httpPort); httpPeers[uint64(i)] != want {
			t.Errorf("--http-peers: replica %d is %q, want %q", i, httpPeers[uint64(i)], want)
		}
	}
	if _, port, err := net.SplitHostPort(f["http"]); err != nil || port != strconv.Itoa(int(httpPort)) {
		t.Errorf("--http=%s: want the http port %d", f["http"], httpPort)
	}
}

// Probes: ready is /readyz, alive is /livez, on the HTTP API's port.
func TestProbes(t *testing.T) {
	m := load(t)
	c := container(t, m.sts)
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/livez"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path {
			t.Errorf("%s probe path %q, want %q", p.name, g.Path, p.path)
		}
		if g.Port != intstr.FromString("http") && g.Port != intstr.FromInt32(containerPort(t, c, "http")) {
			t.Errorf("%s probe port %v: want the container's http port", p.name, g.Port.String())
		}
		// /readyz takes up to 800 ms (a read through each group's
		// leader): Kubernetes' default timeout, 1 s, left a loaded node
		// no slack, and a probe that times out counts as a failure.
		if p.probe.TimeoutSeconds < 2 {
			t.Errorf("%s probe timeoutSeconds %d: want at least 2 (/readyz may take 800 ms)", p.name, p.probe.TimeoutSeconds)
		}
		if period := max(p.probe.PeriodSeconds, 10); p.probe.TimeoutSeconds > period {
			t.Errorf("%s probe timeoutSeconds %d exceeds its period %d", p.name, p.probe.TimeoutSeconds, period)
		}
	}
}

// The image is a version, never :latest, and the Dockerfile's and
// README.md's build commands tag and stamp that same version.
func TestImagePinned(t *testing.T) {
	m := load(t)
	image := container(t, m.sts).Image
	name, tag, ok := strings.Cut(image, ":")
	if strings.Contains(image, "@sha256:") {
		return // a digest pins it exactly
	}
	if !ok || tag == "" || tag == "latest" || strings.Contains(tag, "/") {
		t.Fatalf("image %q: want a version tag, not latest", image)
	}
	for _, f := range []string{"Dockerfile", "README.md"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"-t " + name + ":" + tag, "VERSION=" + tag} {
			if !strings.Contains(string(data), want) {
				t.Errorf("%s: no %q: its build command must tag and stamp the version fencelock.yaml pins", f, want)
			}
		}
		if strings.Contains(string(data), name+":latest") {
			t.Errorf("%s still names %s:latest", f, name)
		}
	}
}

// admits reports whether ingress rule r opens port (a container port's
// name, or its number) at all: a rule without ports opens every port.
func admits(r networkingv1.NetworkPolicyIngressRule, c corev1.Container, port string) bool {
	if len(r.Ports) == 0 {
		return true
	}
	for _, p := range r.Ports {
		if p.Port == nil {
			return true
		}
		if p.Port.String() == port {
			return true
		}
		for _, cp := range c.Ports {
			if cp.Name == port && p.Port.Type == intstr.Int && p.Port.IntVal == cp.ContainerPort {
				return true
			}
		}
	}
	return false
}

// The NetworkPolicy covers the pods; the raft port admits the group's own
// pods alone (no other pod, namespace or address: a raft message from
// elsewhere is at best noise), and the HTTP port admits them too, for the
// forwarding of --http-peers.
func TestNetworkPolicy(t *testing.T) {
	m := load(t)
	pod := m.sts.Spec.Template
	np := m.netpol.Spec
	sel, err := metav1.LabelSelectorAsSelector(&np.PodSelector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
		t.Fatalf("the NetworkPolicy's podSelector %v does not select the StatefulSet's pods %v (%v)", np.PodSelector, pod.Labels, err)
	}
	ingress := len(np.PolicyTypes) == 0
	for _, pt := range np.PolicyTypes {
		ingress = ingress || pt == networkingv1.PolicyTypeIngress
	}
	if !ingress {
		t.Fatal("the NetworkPolicy does not restrict ingress")
	}
	c := container(t, m.sts)
	group := func(p networkingv1.NetworkPolicyPeer) bool {
		if p.PodSelector == nil || p.NamespaceSelector != nil || p.IPBlock != nil {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(p.PodSelector)
		return err == nil && !s.Empty() && s.Matches(labels.Set(pod.Labels)) &&
			labels.SelectorFromSet(pod.Labels).Matches(labels.Set(p.PodSelector.MatchLabels))
	}
	httpFromGroup := false
	for i, r := range np.Ingress {
		if admits(r, c, "raft") {
			if len(r.From) == 0 {
				t.Errorf("ingress rule %d admits the raft port from everywhere", i)
			}
			for _, p := range r.From {
				if !group(p) {
					t.Errorf("ingress rule %d admits the raft port from %+v, not only the group's pods", i, p)
				}
			}
		}
		if admits(r, c, "http") {
			for _, p := range r.From {
				httpFromGroup = httpFromGroup || group(p) || (p.PodSelector != nil && len(p.PodSelector.MatchLabels) == 0 &&
					len(p.PodSelector.MatchExpressions) == 0 && p.NamespaceSelector == nil)
			}
			httpFromGroup = httpFromGroup || len(r.From) == 0
		}
	}
	if !httpFromGroup {
		t.Error("the group's pods may not reach each other's HTTP port: --http-peers forwarding would fail")
	}
}

// The API runs with a tokens file from the shipped Secret, mounted
// read-only and not optional (a pod waits for the Secret rather than serve
// an open API), and the Secret as shipped holds no token, so a template
// applied unedited makes serve refuse to start instead of accepting a
// published token.
func TestTokensSecret(t *testing.T) {
	m := load(t)
	c := container(t, m.sts)
	f := flags(t, c)
	path := f["tokens-file"]
	if path == "" {
		t.Fatal("no --tokens-file: the API would take calls from anyone who reaches it")
	}
	dir, key := path[:strings.LastIndexByte(path, '/')+1], path[strings.LastIndexByte(path, '/')+1:]
	var mount *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if strings.TrimSuffix(vm.MountPath, "/")+"/" == dir {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly || mount.SubPath != "" {
		t.Fatalf("--tokens-file=%s: want a whole volume mounted read-only at %s, got %+v", path, dir, mount)
	}
	var src *corev1.SecretVolumeSource
	for _, v := range m.sts.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name {
			src = v.Secret
		}
	}
	if src == nil || (src.Optional != nil && *src.Optional) || len(src.Items) != 0 {
		t.Fatalf("volume %q: want a Secret, not optional, every key; got %+v", mount.Name, src)
	}
	secret := m.secrets[0]
	if secret.Name != src.SecretName {
		t.Fatalf("%s ships Secret %q, the pods mount %q", secretFile, secret.Name, src.SecretName)
	}
	for _, k := range []string{key, "admin"} {
		if _, ok := secret.StringData[k]; !ok {
			t.Errorf("Secret %s: no key %q", secret.Name, k)
		}
	}
	for n, l := range strings.Split(secret.StringData[key], "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			t.Errorf("%s: line %d of %q is a token, %q: a published token would be accepted", secretFile, n+1, key, l)
		}
	}
	for k, v := range secret.StringData {
		if k != key && strings.TrimSpace(v) != "" {
			t.Errorf("%s: the %s token is set as shipped", secretFile, k)
		}
	}
}

// The image's build context leaves out what is large, private or local:
// the git history, benchmark results, built test binaries, data dirs.
func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, want := range []string{".git", "bench/results", "**/*.test", "**/data"} {
		if !lines[want] {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	for _, keep := range []string{"go.mod", "go.sum", "*.go", "**/*.go", "cmd", "httpapi", "internal"} {
		if lines[keep] || lines["/"+keep] {
			t.Errorf(".dockerignore excludes %s, which the build needs", keep)
		}
	}
}

// The PodDisruptionBudget keeps a quorum of the StatefulSet's replicas up
// through voluntary disruptions.
func TestDisruptionBudgetKeepsQuorum(t *testing.T) {
	m := load(t)
	replicas := int(*m.sts.Spec.Replicas)
	quorum := replicas/2 + 1
	pdb := m.pdb.Spec
	sel, err := metav1.LabelSelectorAsSelector(pdb.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(m.sts.Spec.Template.Labels)) {
		t.Fatalf("the PDB's selector %v does not select the StatefulSet's pods (%v)", pdb.Selector, err)
	}
	var available int
	switch {
	case pdb.MaxUnavailable != nil && pdb.MinAvailable == nil:
		n, err := intstr.GetScaledValueFromIntOrPercent(pdb.MaxUnavailable, replicas, true)
		if err != nil {
			t.Fatal(err)
		}
		available = replicas - n
		if n < 1 {
			t.Errorf("maxUnavailable %v blocks every drain", pdb.MaxUnavailable)
		}
	case pdb.MinAvailable != nil && pdb.MaxUnavailable == nil:
		n, err := intstr.GetScaledValueFromIntOrPercent(pdb.MinAvailable, replicas, true)
		if err != nil {
			t.Fatal(err)
		}
		available = n
	default:
		t.Fatal("want exactly one of minAvailable and maxUnavailable")
	}
	if available < quorum {
		t.Errorf("the PDB leaves %d of %d replicas up: a quorum needs %d", available, replicas, quorum)
	}
}

// Stopping a pod gives `fencelock serve` time to hand leadership over: a
// preStop pause (the client Service stops routing to the pod), then SIGTERM,
// within the grace period.
func TestGracefulStop(t *testing.T) {
	m := load(t)
	pod := m.sts.Spec.Template.Spec
	c := container(t, m.sts)
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("want a preStop sleep")
	}
	pause := c.Lifecycle.PreStop.Sleep.Seconds
	if pause < 1 {
		t.Errorf("preStop sleeps %ds", pause)
	}
	// After SIGTERM, serve gives calls in flight 5 s, then closes the
	// replica, which hands leadership over within its own bound: leave
	// 15 s for both.
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < pause+15 {
		t.Errorf("terminationGracePeriodSeconds %v: want at least %d (preStop %ds + 15 s)", g, pause+15, pause)
	}
}

// A pod's replica ID can outlive its volume: --id-file names the pod's key
// in the optional ConfigMap fencelock-ids, mounted read-only, so that pod
// fencelock-3 can run replica 4 once replica 3 was replaced (README.md,
// "Replacing a replica"). --addr is the pod's own name under the headless
// Service, which for every pod of the bootstrap list is its --peers entry
// (serve refuses a bootstrapping replica whose --addr is not), and for a
// replacement the raft address it was added at.
func TestIDFileOverride(t *testing.T) {
	m := load(t)
	sts, pod := m.sts, m.sts.Spec.Template.Spec
	c := container(t, sts)
	f := flags(t, c)
	var podNameVar string
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			podNameVar = "$(" + e.Name + ")"
		}
	}
	if podNameVar == "" {
		t.Fatal("no env var holds the pod's name (downward API metadata.name)")
	}
	dir, file := f["id-file"][:strings.LastIndexByte(f["id-file"], '/')+1], f["id-file"][strings.LastIndexByte(f["id-file"], '/')+1:]
	if file != podNameVar {
		t.Errorf("--id-file=%s: want the file named after the pod, %s", f["id-file"], podNameVar)
	}
	var mount *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if strings.TrimSuffix(vm.MountPath, "/")+"/" == dir {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("--id-file=%s: no volume mounted at %s", f["id-file"], dir)
	}
	if !mount.ReadOnly || mount.SubPath != "" {
		t.Errorf("the ids volume: want it mounted read-only, whole (a subPath mount never sees a later key), got %+v", *mount)
	}
	var cm *corev1.ConfigMapVolumeSource
	for _, v := range pod.Volumes {
		if v.Name == mount.Name {
			cm = v.ConfigMap
		}
	}
	if cm == nil || cm.Name != "fencelock-ids" || cm.Optional == nil || !*cm.Optional || len(cm.Items) != 0 {
		t.Fatalf("volume %q: want the optional ConfigMap fencelock-ids, every key, got %+v", mount.Name, cm)
	}

	headless := m.service(t, sts.Spec.ServiceName)
	raftPort := strconv.Itoa(int(servicePort(t, headless, "raft")))
	peers := parseIDMap(t, f["peers"])
	for i := int(sts.Spec.Ordinals.Start); i < int(sts.Spec.Ordinals.Start)+int(*sts.Spec.Replicas); i++ {
		name := fmt.Sprintf("%s-%d", sts.Name, i)
		if got := strings.ReplaceAll(f["addr"], podNameVar, name); got != peers[uint64(i)] {
			t.Errorf("pod %s: --addr=%s, but its --peers entry is %s", name, got, peers[uint64(i)])
		}
		if want := net.JoinHostPort(name+"."+headless.Name, raftPort); strings.ReplaceAll(f["addr"], podNameVar, name) != want {
			t.Errorf("pod %s: --addr=%s, want %s", name, f["addr"], want)
		}
	}
}
