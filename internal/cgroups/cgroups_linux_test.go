package cgroups

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/testkit"
)

// testParent is this package's own cgroup parent, apart from moat's "/moat".
const testParent = "/moatcgtest"

func requireRoot(t *testing.T) {
	t.Helper()
	testkit.RequireRoot(t)
	if _, err := os.Stat(Root); err != nil {
		testkit.Missing(t, "no cgroup mount: %v", err)
	}
}

func TestLifecycle(t *testing.T) {
	requireRoot(t)
	path := testParent + "/lifecycle"
	t.Cleanup(func() { _ = Remove(path); _ = Remove(testParent) })

	lim := Limits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 1}
	if err := Create(path, lim); err != nil {
		t.Fatalf("Create: %v", err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := AddPID(path, cmd.Process.Pid); err != nil {
		t.Fatalf("AddPID: %v", err)
	}

	st, err := ReadStats(path)
	if err != nil {
		t.Fatalf("ReadStats: %v", err)
	}
	if st.MemoryLimit != uint64(lim.MemoryBytes) {
		t.Errorf("MemoryLimit = %d, want %d", st.MemoryLimit, lim.MemoryBytes)
	}
	if st.Pids != 1 {
		t.Errorf("Pids = %d, want 1", st.Pids)
	}
	if st.Time.IsZero() {
		t.Error("Time is zero")
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := Remove(path); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	for _, d := range Dirs(path) {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Remove (stat: %v)", d, err)
		}
	}
	if err := Remove(path); err != nil {
		t.Errorf("second Remove = %v, want nil for an absent cgroup", err)
	}
	if _, err := ReadStats(path); !errdefs.IsNotFound(err) {
		t.Errorf("ReadStats of a removed cgroup = %v, want not found", err)
	}
}

func TestRemoveAllEveryHierarchy(t *testing.T) {
	requireRoot(t)
	if V2Only() {
		t.Skip("by design: a cgroup v2-only host has no v1 hierarchies to remove from")
	}
	path := testParent + "/all"
	t.Cleanup(func() { _ = RemoveAll(path); _ = RemoveAll(testParent) })
	var made []string
	for _, d := range allDirs(path)[1:] { // [0] is the v2 path, a plain dir on tmpfs here
		if err := os.MkdirAll(d, 0o755); err == nil {
			made = append(made, d)
		}
	}
	if len(made) == 0 {
		t.Skip("by design: no cgroup v1 hierarchy of this host accepted a cgroup")
	}
	if err := RemoveAll(path); err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	for _, d := range made {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after RemoveAll", d)
		}
	}
}

func TestReadUint(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		body string
		want uint64
		ok   bool
	}{
		"number": {"42\n", 42, true},
		"max":    {"max\n", 0, true},
		"junk":   {"x\n", 0, false},
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readUint(p)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: readUint = %d, %v; want %d, ok=%v", name, got, err, tc.want, tc.ok)
		}
	}
	if _, err := readUint(filepath.Join(dir, "absent")); !errdefs.IsNotFound(err) {
		t.Errorf("absent file: %v, want not found", err)
	}
	p := filepath.Join(dir, "cpu.stat")
	if err := os.WriteFile(p, []byte("usage_usec 7\nuser_usec 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := readKey(p, "user_usec"); err != nil || v != 3 {
		t.Errorf("readKey = %d, %v; want 3", v, err)
	}
	if _, err := readKey(p, "nope"); err == nil {
		t.Error("readKey of a missing key: no error")
	}
}

// TestBackground: a background cgroup has the lowest CPU weight until
// SetBackground gives it the default back.
func TestBackground(t *testing.T) {
	requireRoot(t)
	path := testParent + "/background"
	t.Cleanup(func() { _ = Remove(path); _ = Remove(testParent) })
	if err := Create(path, Limits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 1, Background: true}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	weight := func() string {
		f, _ := cpuWeight(false)
		for _, d := range Dirs(path) {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
		t.Fatalf("no %s for %s", f, path)
		return ""
	}
	_, low := cpuWeight(true)
	if got := weight(); got != low {
		t.Fatalf("background weight %s, want %s", got, low)
	}
	if err := SetBackground(path, false); err != nil {
		t.Fatal(err)
	}
	if _, def := cpuWeight(false); weight() != def {
		t.Fatalf("foreground weight %s, want %s", weight(), def)
	}
}
