//go:build linux

package deploy

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// kubeDir holds the Kubernetes manifests, secrets/ included.
const kubeDir = "kubernetes"

// manifests are the objects of every manifest under kubeDir, each
// decoded strictly into its k8s.io/api type.
type manifests struct {
	objects     []object
	namespaces  []*corev1.Namespace
	secrets     []*corev1.Secret
	configMaps  []*corev1.ConfigMap
	services    []*corev1.Service
	deployments []*appsv1.Deployment
	daemonSets  []*appsv1.DaemonSet
}

// object is one decoded object, whatever its kind.
type object struct {
	file, kind string
	meta       metav1.Object
}

func (o object) String() string { return fmt.Sprintf("%s %s (%s)", o.kind, o.meta.GetName(), o.file) }

// docSepRE separates the documents of a multi-document YAML file.
var docSepRE = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadManifests decodes every .yaml and .yml file under kubeDir.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{}
	err := filepath.WalkDir(kubeDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !slices.Contains([]string{".yaml", ".yml"}, filepath.Ext(path)) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, doc := range docSepRE.Split(string(b), -1) {
			if err := m.add(path, []byte(doc)); err != nil {
				return fmt.Errorf("%s, document %d: %w", path, i+1, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.objects) == 0 {
		t.Fatalf("no manifests under %s", kubeDir)
	}
	return m
}

// add decodes one YAML document (nothing for one of comments alone) into
// the type its apiVersion and kind name; a field the type does not have,
// or a kind these manifests are not expected to hold, is an error.
func (m *manifests) add(file string, doc []byte) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	if bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
		return nil
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var o metav1.Object
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		o, err = decodeInto(doc, &m.namespaces)
	case "v1 Secret":
		o, err = decodeInto(doc, &m.secrets)
	case "v1 ConfigMap":
		o, err = decodeInto(doc, &m.configMaps)
	case "v1 Service":
		o, err = decodeInto(doc, &m.services)
	case "apps/v1 Deployment":
		o, err = decodeInto(doc, &m.deployments)
	case "apps/v1 DaemonSet":
		o, err = decodeInto(doc, &m.daemonSets)
	default:
		return fmt.Errorf("apiVersion %q kind %q: not a kind these manifests hold", tm.APIVersion, tm.Kind)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", tm.Kind, err)
	}
	m.objects = append(m.objects, object{file: file, kind: tm.Kind, meta: o})
	return nil
}

// decodeInto decodes doc strictly (unknown or duplicate fields fail) into
// a new T and appends it to list.
func decodeInto[T any, PT interface {
	*T
	metav1.Object
}](doc []byte, list *[]PT) (metav1.Object, error) {
	v := PT(new(T))
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return nil, err
	}
	*list = append(*list, v)
	return v, nil
}

// workload is a Deployment's or a DaemonSet's pod template.
type workload struct {
	kind, name, namespace string
	selector              *metav1.LabelSelector
	pod                   *corev1.PodTemplateSpec
}

func (w workload) String() string { return w.kind + " " + w.name }

// workloads are the manifests' Deployments and DaemonSets.
func (m *manifests) workloads() []workload {
	var out []workload
	for _, d := range m.deployments {
		out = append(out, workload{"Deployment", d.Name, d.Namespace, d.Spec.Selector, &d.Spec.Template})
	}
	for _, d := range m.daemonSets {
		out = append(out, workload{"DaemonSet", d.Name, d.Namespace, d.Spec.Selector, &d.Spec.Template})
	}
	return out
}

// containers are a pod's init containers, then its containers.
func containers(spec *corev1.PodSpec) []*corev1.Container {
	var out []*corev1.Container
	for i := range spec.InitContainers {
		out = append(out, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	return out
}

func (m *manifests) secret(ns, name string) *corev1.Secret {
	i := slices.IndexFunc(m.secrets, func(s *corev1.Secret) bool { return s.Namespace == ns && s.Name == name })
	if i < 0 {
		return nil
	}
	return m.secrets[i]
}

func (m *manifests) configMap(ns, name string) *corev1.ConfigMap {
	i := slices.IndexFunc(m.configMaps, func(c *corev1.ConfigMap) bool { return c.Namespace == ns && c.Name == name })
	if i < 0 {
		return nil
	}
	return m.configMaps[i]
}

// secretKeys are a Secret's keys, data and stringData alike.
func secretKeys(s *corev1.Secret) map[string]bool {
	keys := map[string]bool{}
	for k := range s.Data {
		keys[k] = true
	}
	for k := range s.StringData {
		keys[k] = true
	}
	return keys
}

// configMapKeys are a ConfigMap's keys, data and binaryData alike.
func configMapKeys(c *corev1.ConfigMap) map[string]bool {
	keys := map[string]bool{}
	for k := range c.Data {
		keys[k] = true
	}
	for k := range c.BinaryData {
		keys[k] = true
	}
	return keys
}

// moatCommand is what a container runs of moat: its command lines (the
// words after the binary), from the container's command and args, or
// from the shell script it runs (sh -c SCRIPT), which is returned too.
func moatCommand(c *corev1.Container) (argvs [][]string, script string) {
	argv := append(slices.Clone(c.Command), c.Args...)
	switch {
	case len(argv) == 0:
		return nil, ""
	case isMoat(argv[0]):
		return [][]string{argv[1:]}, ""
	case slices.Contains([]string{"sh", "bash"}, filepath.Base(argv[0])) && len(argv) >= 3 && argv[1] == "-c":
		return scriptInvocations(argv[2]), argv[2]
	}
	return nil, ""
}

// envNames are the variables a container's env and envFrom define.
func (m *manifests) envNames(ns string, c *corev1.Container) map[string]bool {
	names := map[string]bool{}
	for _, e := range c.Env {
		names[e.Name] = true
	}
	for _, ef := range c.EnvFrom {
		var keys map[string]bool
		switch {
		case ef.ConfigMapRef != nil:
			if cm := m.configMap(ns, ef.ConfigMapRef.Name); cm != nil {
				keys = configMapKeys(cm)
			}
		case ef.SecretRef != nil:
			if s := m.secret(ns, ef.SecretRef.Name); s != nil {
				keys = secretKeys(s)
			}
		}
		for k := range keys {
			names[ef.Prefix+k] = true
		}
	}
	return names
}

// mountAt is the mount of c at path, nil if none.
func mountAt(c *corev1.Container, path string) *corev1.VolumeMount {
	i := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return filepath.Clean(vm.MountPath) == filepath.Clean(path)
	})
	if i < 0 {
		return nil
	}
	return &c.VolumeMounts[i]
}

// volume is spec's volume name, nil if none.
func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
	if i < 0 {
		return nil
	}
	return &spec.Volumes[i]
}

// containerPort resolves a probe's or a Service's port (a number or a
// port name) to one of c's declared ports; 0 if it is none of them.
func containerPort(c *corev1.Container, port intstr.IntOrString) int32 {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return p.ContainerPort
		}
	}
	return 0
}

// labelsMatch reports whether selector (matchLabels) selects labels.
func labelsMatch(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
