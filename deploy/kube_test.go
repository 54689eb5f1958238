//go:build linux

package deploy

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/cluster/join"
	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/secrets"
)

// serve is a workload's container that runs moat serve, and its command
// line.
type serve struct {
	c  *corev1.Container
	iv invocation
}

// serveOf finds w's one container running moat serve.
func serveOf(t *testing.T, w workload) serve {
	t.Helper()
	var found []serve
	for _, c := range w.pod.Spec.Containers {
		argvs, script := moatCommand(&c)
		if script != "" || len(argvs) != 1 || len(argvs[0]) == 0 || argvs[0][0] != "serve" {
			continue
		}
		iv, err := parseInvocation(t, argvs[0])
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		found = append(found, serve{&c, iv})
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d containers run moat serve, want 1", w, len(found))
	}
	return found[0]
}

// dataDir is the data dir s runs with: --data-dir, else MOAT_DATA_DIR,
// else the default.
func (s serve) dataDir() string {
	if !s.iv.has("data-dir") {
		if i := slices.IndexFunc(s.c.Env, func(e corev1.EnvVar) bool { return e.Name == "MOAT_DATA_DIR" }); i >= 0 {
			return s.c.Env[i].Value
		}
	}
	return s.iv.valueOr("data-dir")
}

// env is s's environment variable name, nil if it has none.
func (s serve) env(name string) *corev1.EnvVar {
	i := slices.IndexFunc(s.c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return nil
	}
	return &s.c.Env[i]
}

func TestKubeNamespace(t *testing.T) {
	m := loadManifests(t)
	if len(m.namespaces) != 1 {
		t.Fatalf("%d Namespaces, want 1", len(m.namespaces))
	}
	ns := m.namespaces[0].Name
	seen := map[string]string{}
	for _, o := range m.objects {
		if o.meta.GetName() == "" {
			t.Errorf("%s has no name", o)
		}
		if o.kind != "Namespace" && o.meta.GetNamespace() != ns {
			t.Errorf("%s is in namespace %q, want %q", o, o.meta.GetNamespace(), ns)
		}
		key := o.kind + "/" + o.meta.GetName()
		if f, ok := seen[key]; ok {
			t.Errorf("%s is also in %s", o, f)
		}
		seen[key] = o.file
	}
}

func TestKubeSelectors(t *testing.T) {
	m := loadManifests(t)
	for _, w := range m.workloads() {
		if w.selector == nil || len(w.selector.MatchExpressions) > 0 || !labelsMatch(w.selector.MatchLabels, w.pod.Labels) {
			t.Errorf("%s: selector %v does not select its own pods (labels %v)", w, w.selector, w.pod.Labels)
		}
		for _, o := range m.workloads() {
			if o != w && labelsMatch(w.selector.MatchLabels, o.pod.Labels) {
				t.Errorf("%s's selector also selects the pods of %s", w, o)
			}
		}
	}
}

// TestKubeService: the Service sends port 3000 to the API servers, and
// only to them, on a port their moat serve listens on.
func TestKubeService(t *testing.T) {
	m := loadManifests(t)
	if len(m.services) == 0 {
		t.Fatal("no Service")
	}
	for _, svc := range m.services {
		var sel []workload
		for _, w := range m.workloads() {
			if labelsMatch(svc.Spec.Selector, w.pod.Labels) {
				sel = append(sel, w)
			}
		}
		if len(sel) != 1 || sel[0].kind != "Deployment" {
			t.Errorf("Service %s selects %v, want the API servers' Deployment alone", svc.Name, sel)
			continue
		}
		s := serveOf(t, sel[0])
		if r := s.iv.value("role"); r != "api" {
			t.Errorf("Service %s selects %s, whose role is %q, want api", svc.Name, sel[0], r)
		}
		_, addrPort, _ := net.SplitHostPort(s.iv.valueOr("addr"))
		has3000 := false
		for _, p := range svc.Spec.Ports {
			has3000 = has3000 || p.Port == 3000
			tp := containerPort(s.c, p.TargetPort)
			if tp == 0 {
				t.Errorf("Service %s port %d: targetPort %s is no port of %s's container %s", svc.Name, p.Port, p.TargetPort.String(), sel[0], s.c.Name)
			} else if fmt.Sprint(tp) != addrPort {
				t.Errorf("Service %s port %d goes to %d, but moat serve listens on %s", svc.Name, p.Port, tp, s.iv.valueOr("addr"))
			}
		}
		if !has3000 {
			t.Errorf("Service %s has no port 3000", svc.Name)
		}
	}
}

// TestKubeRoles: the Deployment's pods are API servers, the DaemonSet's
// privileged nodes in the host's network and PID namespaces; a node API
// is on the pod's IP.
func TestKubeRoles(t *testing.T) {
	m := loadManifests(t)
	if len(m.deployments) != 1 || len(m.daemonSets) != 1 {
		t.Fatalf("%d Deployments and %d DaemonSets, want one of each", len(m.deployments), len(m.daemonSets))
	}
	if r := m.deployments[0].Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("Deployment %s: replicas %v, want 2", m.deployments[0].Name, r)
	}
	for _, w := range m.workloads() {
		s := serveOf(t, w)
		spec := &w.pod.Spec
		switch w.kind {
		case "Deployment":
			if r := s.iv.value("role"); r != "api" {
				t.Errorf("%s runs moat serve --role %q, want api", w, r)
			}
			if spec.HostNetwork || spec.HostPID {
				t.Errorf("%s: an API server needs neither the host's network nor its PIDs", w)
			}
			if s.iv.has("node-addr") {
				checkNodeAddr(t, w, s)
			}
			for _, ds := range m.daemonSets {
				if mayShareHost(spec, ds.Spec.Template.Spec.NodeSelector) {
					t.Errorf("%s may run on a host of DaemonSet %s (one moat serve per host): "+
						"want a required node affinity that its nodeSelector's labels do not exist", w, ds.Name)
				}
			}
		case "DaemonSet":
			checkNode(t, w, s)
		}
	}
}

// mayShareHost reports whether spec's pods may be scheduled on a host
// that nodeSelector picks: unless every term of its required node
// affinity asks that one of nodeSelector's labels not exist (or not have
// its value).
func mayShareHost(spec *corev1.PodSpec, nodeSelector map[string]string) bool {
	a := spec.Affinity
	if len(nodeSelector) == 0 || a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		excludes := slices.ContainsFunc(term.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool {
			v, ok := nodeSelector[e.Key]
			return ok && (e.Operator == corev1.NodeSelectorOpDoesNotExist ||
				(e.Operator == corev1.NodeSelectorOpNotIn && slices.Contains(e.Values, v)))
		})
		if !excludes {
			return true
		}
	}
	return false
}

// checkNode checks a node's pod: privileged, the host's network and
// PIDs, --role node, its node API on the pod's (the host's) IP and the
// node's name as its ID.
func checkNode(t *testing.T, w workload, s serve) {
	t.Helper()
	spec := &w.pod.Spec
	if sc := s.c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("%s: container %s is not privileged", w, s.c.Name)
	}
	if !spec.HostNetwork || !spec.HostPID {
		t.Errorf("%s: hostNetwork %v, hostPID %v: want both", w, spec.HostNetwork, spec.HostPID)
	}
	if spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("%s: dnsPolicy %q: want ClusterFirstWithHostNet, or the join cannot resolve the Service", w, spec.DNSPolicy)
	}
	if r := s.iv.value("role"); r != "node" {
		t.Errorf("%s runs moat serve --role %q, want node", w, r)
	}
	checkNodeAddr(t, w, s)
	checkDownward(t, w, s, "--node-id", s.iv.value("node-id"), "NODE_NAME", "spec.nodeName")
}

// checkNodeAddr checks --node-addr: $(POD_IP) and a fixed port.
func checkNodeAddr(t *testing.T, w workload, s serve) {
	t.Helper()
	host, port, err := net.SplitHostPort(s.iv.value("node-addr"))
	if err != nil || port == "" || port == "0" {
		t.Errorf("%s: --node-addr %q: want HOST:PORT with a fixed port (%v)", w, s.iv.value("node-addr"), err)
	}
	checkDownward(t, w, s, "--node-addr's host", host, "POD_IP", "status.podIP")
}

// checkDownward checks that a flag's value (got) is $(env), with env the
// downward API's field.
func checkDownward(t *testing.T, w workload, s serve, flag, got, env, field string) {
	t.Helper()
	e := s.env(env)
	if got != "$("+env+")" {
		t.Errorf("%s: %s is %q, want $(%s)", w, flag, got, env)
	}
	if e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
		t.Errorf("%s: env %s is not %s from the downward API", w, env, field)
	}
}

// dollarRefRE finds the $(NAME) references Kubernetes expands in a
// container's command and args.
var dollarRefRE = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestKubeMoatCommands checks every moat command line of every container
// (its command and args, or a shell script it runs) against the built
// binary's help, and that what the line reads is defined.
func TestKubeMoatCommands(t *testing.T) {
	m := loadManifests(t)
	images := map[string]bool{}
	for _, w := range m.workloads() {
		for _, c := range containers(&w.pod.Spec) {
			t.Run(w.name+"/"+c.Name, func(t *testing.T) {
				images[c.Image] = true
				checkMoatCommand(t, m, w, c)
			})
		}
	}
	if len(images) != 1 {
		t.Errorf("containers run images %v: want one moat image for all", images)
	}
}

func checkMoatCommand(t *testing.T, m *manifests, w workload, c *corev1.Container) {
	argvs, script := moatCommand(c)
	if len(argvs) == 0 && script == "" {
		t.Fatalf("runs neither moat nor a shell script: %q %q", c.Command, c.Args)
	}
	env := m.envNames(w.namespace, c)
	known := map[string]bool{}
	for _, argv := range argvs {
		iv, err := parseInvocation(t, argv)
		if err != nil {
			t.Error(err)
			continue
		}
		for k := range iv.cli.env {
			known[k] = true
		}
		if iv.has("store") {
			t.Errorf("moat %s --store: the store URL holds a password; give it as MOAT_STORE from a Secret", iv.cli.path)
		}
		if iv.cli.path == "serve" {
			if e := (serve{c, iv}).env("MOAT_STORE"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("moat serve: MOAT_STORE does not come from a Secret")
			}
		}
	}
	for name := range env {
		if strings.HasPrefix(name, "MOAT_") && !known[name] && !t.Failed() {
			t.Errorf("env %s: no variable the help of the moat commands it runs names", name)
		}
	}
	var reads [][]string
	if script == "" {
		reads = dollarRefRE.FindAllStringSubmatch(strings.Join(append(slices.Clone(c.Command), c.Args...), " "), -1)
	} else {
		reads = shellVarRE.FindAllStringSubmatch(script, -1)
	}
	for _, r := range reads {
		if !env[r[1]] {
			t.Errorf("reads $%s, which its env does not define", r[1])
		}
	}
}

// TestKubeProbes: every moat serve has startup (optional), readiness and
// liveness probes on GET /health at the address --addr listens on.
func TestKubeProbes(t *testing.T) {
	m := loadManifests(t)
	for _, w := range m.workloads() {
		s := serveOf(t, w)
		host, port, err := net.SplitHostPort(s.iv.valueOr("addr"))
		if err != nil {
			t.Errorf("%s: --addr %q: %v", w, s.iv.valueOr("addr"), err)
			continue
		}
		loopback := host == "localhost" || net.ParseIP(host).IsLoopback()
		for _, p := range []struct {
			kind     string
			probe    *corev1.Probe
			optional bool
		}{{"startup", s.c.StartupProbe, true}, {"readiness", s.c.ReadinessProbe, false}, {"liveness", s.c.LivenessProbe, false}} {
			if p.probe == nil {
				if !p.optional {
					t.Errorf("%s: no %s probe", w, p.kind)
				}
				continue
			}
			g := p.probe.HTTPGet
			switch {
			case g == nil || g.Path != "/health":
				t.Errorf("%s: the %s probe is not GET /health", w, p.kind)
			case fmt.Sprint(containerPort(s.c, g.Port)) != port:
				t.Errorf("%s: the %s probe's port %s is not the --addr port %s", w, p.kind, g.Port.String(), port)
			case loopback && !net.ParseIP(g.Host).IsLoopback():
				t.Errorf("%s: --addr listens on %s, but the %s probe dials %q", w, host, p.kind, g.Host)
			}
		}
	}
}

// TestKubeReferences: every Secret, ConfigMap and key a pod refers to is
// in the manifests (unless the reference is optional), and every Secret
// and ConfigMap of the manifests is used.
func TestKubeReferences(t *testing.T) {
	m := loadManifests(t)
	used := map[string]bool{}
	ref := func(w workload, kind, name, key string, optional *bool) {
		used[kind+"/"+name] = true
		var keys map[string]bool
		if s := m.secret(w.namespace, name); kind == "Secret" && s != nil {
			keys = secretKeys(s)
		} else if c := m.configMap(w.namespace, name); kind == "ConfigMap" && c != nil {
			keys = configMapKeys(c)
		}
		switch {
		case optional != nil && *optional:
		case keys == nil:
			t.Errorf("%s refers to %s %s, which the manifests do not hold", w, kind, name)
		case key != "" && !keys[key]:
			t.Errorf("%s refers to key %s of %s %s, which it does not have", w, key, kind, name)
		}
	}
	for _, w := range m.workloads() {
		for _, v := range w.pod.Spec.Volumes {
			if s := v.Secret; s != nil {
				ref(w, "Secret", s.SecretName, "", s.Optional)
				for _, it := range s.Items {
					ref(w, "Secret", s.SecretName, it.Key, s.Optional)
				}
			}
			if c := v.ConfigMap; c != nil {
				ref(w, "ConfigMap", c.Name, "", c.Optional)
				for _, it := range c.Items {
					ref(w, "ConfigMap", c.Name, it.Key, c.Optional)
				}
			}
		}
		for _, c := range containers(&w.pod.Spec) {
			for _, e := range c.Env {
				if vf := e.ValueFrom; vf != nil && vf.SecretKeyRef != nil {
					ref(w, "Secret", vf.SecretKeyRef.Name, vf.SecretKeyRef.Key, vf.SecretKeyRef.Optional)
				} else if vf != nil && vf.ConfigMapKeyRef != nil {
					ref(w, "ConfigMap", vf.ConfigMapKeyRef.Name, vf.ConfigMapKeyRef.Key, vf.ConfigMapKeyRef.Optional)
				}
			}
			for _, ef := range c.EnvFrom {
				if ef.SecretRef != nil {
					ref(w, "Secret", ef.SecretRef.Name, "", ef.SecretRef.Optional)
				} else if ef.ConfigMapRef != nil {
					ref(w, "ConfigMap", ef.ConfigMapRef.Name, "", ef.ConfigMapRef.Optional)
				}
			}
		}
	}
	for _, o := range m.objects {
		if (o.kind == "Secret" || o.kind == "ConfigMap") && !used[o.kind+"/"+o.meta.GetName()] {
			t.Errorf("%s: no pod uses it", o)
		}
	}
}

// TestKubeVolumes: every mount names a volume of its pod, at most one
// mount per path; every volume is mounted; a Bidirectional mount is a
// privileged container's (Kubernetes refuses it otherwise); every
// container asks for CPU and memory.
func TestKubeVolumes(t *testing.T) {
	m := loadManifests(t)
	for _, w := range m.workloads() {
		mounted := map[string]bool{}
		for _, c := range containers(&w.pod.Spec) {
			paths := map[string]bool{}
			for _, vm := range c.VolumeMounts {
				mounted[vm.Name] = true
				if volume(&w.pod.Spec, vm.Name) == nil {
					t.Errorf("%s: container %s mounts volume %s, which the pod does not declare", w, c.Name, vm.Name)
				}
				if paths[filepath.Clean(vm.MountPath)] {
					t.Errorf("%s: container %s mounts two volumes at %s", w, c.Name, vm.MountPath)
				}
				paths[filepath.Clean(vm.MountPath)] = true
				if p := vm.MountPropagation; p != nil && *p == corev1.MountPropagationBidirectional &&
					(c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged) {
					t.Errorf("%s: container %s: a Bidirectional mount needs a privileged container", w, c.Name)
				}
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s: container %s has no CPU or memory request", w, c.Name)
			}
		}
		for _, v := range w.pod.Spec.Volumes {
			if !mounted[v.Name] {
				t.Errorf("%s: volume %s is mounted by no container", w, v.Name)
			}
		}
	}
}

// TestKubeNodeHost: a node keeps its data dir, its runtime state, its
// network namespaces and its cgroups on the host, where the next pod
// finds its sandboxes; the mounts that sandboxes' mounts appear under are
// Bidirectional; no host device is required (/dev/kvm is optional: a
// privileged container sees the host's devices).
func TestKubeNodeHost(t *testing.T) {
	m := loadManifests(t)
	for _, ds := range m.daemonSets {
		w := workload{kind: "DaemonSet", name: ds.Name, namespace: ds.Namespace, pod: &ds.Spec.Template}
		s := serveOf(t, w)
		for _, tc := range []struct {
			path          string
			bidirectional bool
		}{
			{s.dataDir(), true},
			{runtime.Host{}.ScopeStateDir(), true},
			{"/run/netns", true}, // package netpolicy's netns directory
			{cgroups.Root, false},
		} {
			vm := mountAt(s.c, tc.path)
			if vm == nil {
				t.Errorf("%s: nothing is mounted at %s", w, tc.path)
				continue
			}
			v := volume(&ds.Spec.Template.Spec, vm.Name)
			if v == nil || v.HostPath == nil || filepath.Clean(v.HostPath.Path) != filepath.Clean(tc.path) {
				t.Errorf("%s: %s is not the host's %s", w, tc.path, tc.path)
			}
			bidi := vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationBidirectional
			if bidi != tc.bidirectional {
				t.Errorf("%s: %s: Bidirectional %v, want %v", w, tc.path, bidi, tc.bidirectional)
			}
		}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if hp := v.HostPath; hp != nil && hp.Type != nil &&
				*hp.Type != corev1.HostPathDirectory && *hp.Type != corev1.HostPathDirectoryOrCreate {
				t.Errorf("%s: volume %s requires the host to have %s (%s)", w, v.Name, hp.Path, *hp.Type)
			}
		}
	}
}

// TestKubeClusterFiles: the files a server's cluster part reads are where
// moat serve reads them: the API servers' cluster CA in
// DATA-DIR/cluster-ca and every server's secrets.key, copied from Secrets
// by an init container; a node's certificate in DATA-DIR/cluster-node,
// written there by moat cluster join in an init container, once.
func TestKubeClusterFiles(t *testing.T) {
	m := loadManifests(t)
	for _, w := range m.workloads() {
		s := serveOf(t, w)
		dir := s.dataDir()
		want := map[string]string{secrets.KeyFile: filepath.Join(dir, secrets.KeyFile)}
		if s.iv.value("role") == "api" {
			for _, f := range []string{tlsca.CertFile, tlsca.KeyFile} {
				want[f] = filepath.Join(app.ClusterCADir(dir), f)
			}
		} else {
			checkJoin(t, w, s)
		}
		dm := mountAt(s.c, dir)
		if dm == nil {
			t.Errorf("%s: nothing is mounted at the data dir %s", w, dir)
			continue
		}
		if v := volume(&w.pod.Spec, dm.Name); w.kind == "Deployment" && (v == nil || v.EmptyDir == nil) {
			t.Errorf("%s: an API server's data dir %s is not an emptyDir", w, dir)
		}
		for key, dst := range want {
			if !copiesSecretKey(m, w, s, key, dst) {
				t.Errorf("%s: no init container copies a Secret's key %s to %s", w, key, dst)
			}
		}
	}
}

// copiesSecretKey reports whether an init container of w that mounts s's
// data dir volume at the same path runs a script that copies key of a
// Secret it mounts to dst.
func copiesSecretKey(m *manifests, w workload, s serve, key, dst string) bool {
	dir := s.dataDir()
	for i := range w.pod.Spec.InitContainers {
		c := &w.pod.Spec.InitContainers[i]
		_, script := moatCommand(c)
		if dm := mountAt(c, dir); dm == nil || dm.Name != mountAt(s.c, dir).Name || !strings.Contains(script, " "+dst) {
			continue
		}
		for _, vm := range c.VolumeMounts {
			v := volume(&w.pod.Spec, vm.Name)
			if v == nil || v.Secret == nil {
				continue
			}
			sec := m.secret(w.namespace, v.Secret.SecretName)
			if sec != nil && secretKeys(sec)[key] && strings.Contains(script, filepath.Join(vm.MountPath, key)) {
				return true
			}
		}
	}
	return false
}

// checkJoin checks a node's join: an init container runs moat cluster
// join into DATA-DIR/cluster-node of the data dir's volume with the
// node's ID, and only when the node has no certificate there yet (a
// token serves once).
func checkJoin(t *testing.T, w workload, s serve) {
	t.Helper()
	dir := s.dataDir()
	certDir := app.NodeCertDir(dir)
	n := 0
	for i := range w.pod.Spec.InitContainers {
		c := &w.pod.Spec.InitContainers[i]
		argvs, script := moatCommand(c)
		for _, argv := range argvs {
			iv, err := parseInvocation(t, argv)
			if err != nil || iv.cli.path != "cluster join" {
				continue
			}
			n++
			if d := iv.value("dir"); filepath.Clean(d) != certDir {
				t.Errorf("%s: moat cluster join --dir %q, want %s (what moat serve reads)", w, d, certDir)
			}
			if dm := mountAt(c, dir); dm == nil || dm.Name != mountAt(s.c, dir).Name {
				t.Errorf("%s: init container %s does not mount the data dir's volume at %s", w, c.Name, dir)
			}
			if id := strings.Trim(iv.value("node-id"), `"`); id != "$NODE_NAME" || s.iv.value("node-id") != "$(NODE_NAME)" {
				t.Errorf("%s: the join's --node-id %q and moat serve's %q are not both the node's name", w, id, s.iv.value("node-id"))
			}
			if !iv.has("ca-sha256") {
				t.Errorf("%s: moat cluster join without --ca-sha256 trusts any CA", w)
			}
			if cert := filepath.Join(certDir, join.CertFile); !strings.Contains(script, "-s "+cert) {
				t.Errorf("%s: init container %s joins without testing for %s first", w, c.Name, cert)
			}
		}
	}
	if n != 1 {
		t.Errorf("%s: %d init containers run moat cluster join, want 1", w, n)
	}
}
