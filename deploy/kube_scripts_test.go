//go:build linux

package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/secrets"
)

// TestKubeScriptsParse has sh check the syntax of every shell script a
// container runs.
func TestKubeScriptsParse(t *testing.T) {
	m := loadManifests(t)
	for _, w := range m.workloads() {
		for _, c := range containers(&w.pod.Spec) {
			if _, script := moatCommand(c); script != "" {
				if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
					t.Errorf("%s: container %s's script: %v\n%s", w, c.Name, err, out)
				}
			}
		}
	}
}

// TestKubeKeyCopies runs the init containers' scripts that copy the
// shared keys (those that run no moat command) with each mount a
// directory of a temporary root, the Secrets' files a real cluster CA and
// secrets key; moat serve's own loaders must then accept what they wrote
// into the data dir: the same CA (the API servers) and the same secrets
// key (every server).
func TestKubeKeyCopies(t *testing.T) {
	m := loadManifests(t)
	src := t.TempDir()
	ca, err := tlsca.Open(src, "cluster")
	if err != nil {
		t.Fatal(err)
	}
	ring := secrets.NewKeyring(filepath.Join(src, secrets.KeyFile))
	keyID, err := ring.Current()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{} // a Secret's key → the file of real material
	for _, f := range []string{tlsca.CertFile, tlsca.KeyFile, secrets.KeyFile} {
		files[f] = filepath.Join(src, f)
	}
	for _, w := range m.workloads() {
		t.Run(w.name, func(t *testing.T) {
			root := t.TempDir()
			s := serveOf(t, w)
			for i := range w.pod.Spec.InitContainers {
				c := &w.pod.Spec.InitContainers[i]
				if argvs, script := moatCommand(c); script != "" && len(argvs) == 0 {
					runCopyScript(t, m, w, c, script, root, files)
				}
			}
			dataDir := filepath.Join(root, s.dataDir())
			if err := app.SecureDataDir(dataDir); err != nil {
				t.Errorf("the data dir the init containers left: %v", err)
			}
			got, err := secrets.NewKeyring(filepath.Join(dataDir, secrets.KeyFile)).Current()
			if err != nil || got != keyID {
				t.Errorf("secrets key in the data dir: %q (%v), want %q", got, err, keyID)
			}
			if s.iv.value("role") != "api" {
				return
			}
			got2, err := tlsca.Open(app.ClusterCADir(dataDir), "cluster")
			if err != nil || !bytes.Equal(got2.CertPEM(), ca.CertPEM()) {
				t.Errorf("cluster CA in the data dir: %v, or not the Secret's", err)
			}
		})
	}
}

// runCopyScript runs c's script with its mounts moved under root: a
// Secret volume's directory holds the Secret's keys (from files where it
// names real material, else its placeholder value) in the volume's mode.
func runCopyScript(t *testing.T, m *manifests, w workload, c *corev1.Container, script, root string, files map[string]string) {
	t.Helper()
	var paths []string
	for _, vm := range c.VolumeMounts {
		dir := filepath.Join(root, vm.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, vm.MountPath)
		v := volume(&w.pod.Spec, vm.Name)
		if v == nil || v.Secret == nil {
			continue
		}
		sec := m.secret(w.namespace, v.Secret.SecretName)
		if sec == nil {
			t.Fatalf("%s: Secret %s missing", w, v.Secret.SecretName)
		}
		mode := os.FileMode(0o644)
		if v.Secret.DefaultMode != nil {
			mode = os.FileMode(*v.Secret.DefaultMode)
		}
		for key := range secretKeys(sec) {
			b := []byte(sec.StringData[key] + string(sec.Data[key]))
			if f, ok := files[key]; ok {
				var err error
				if b, err = os.ReadFile(f); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, key), b, mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One pass, longest paths first, so that no path is moved twice.
	slices.SortFunc(paths, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, p := range paths {
		pairs = append(pairs, p, filepath.Join(root, p))
	}
	cmd := exec.Command("sh", "-c", strings.NewReplacer(pairs...).Replace(script))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: init container %s: %v\n%s", w, c.Name, err, out)
	}
}
