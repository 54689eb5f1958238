package hostleak

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOf finds a sandbox directory and a process named after an ID, and
// nothing for an ID nobody used.
func TestOf(t *testing.T) {
	dir := t.TempDir()
	id := "tleak" + strings.Repeat("7", 15)
	if got := Of(dir, id); len(got) != 0 {
		t.Fatalf("before: %v", got)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sandboxes", id), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "sleep 30; : "+id)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	got := strings.Join(Of(dir, "other", id), "\n")
	for _, want := range []string{"dir: " + filepath.Join(dir, "sandboxes", id), "process "} {
		if !strings.Contains(got, want) {
			t.Errorf("Of = %q, want an entry %q", got, want)
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	os.RemoveAll(filepath.Join(dir, "sandboxes", id))
	if got := Of(dir, id); len(got) != 0 {
		t.Errorf("after: %v", got)
	}
}
