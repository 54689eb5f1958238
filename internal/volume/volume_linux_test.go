package volume

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/testkit"
)

// TestManager: a held volume cannot be removed; its mount stays while the
// server runs, is adopted by a new manager (a restarted server), and is
// gone with Remove; Close unmounts what nothing holds.
func TestManager(t *testing.T) {
	testkit.RequireRoot(t) // loop mounts
	ctx := context.Background()
	data := t.TempDir()
	m, err := New(data)
	if err != nil {
		t.Fatal(err)
	}
	const id = "vtest1"
	if err := m.Create(ctx, id, 8, "1000:1000"); err != nil {
		t.Fatal(err)
	}
	root, release, err := m.Acquire(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	commit := func(context.Context) error { return nil }
	if err := m.Remove(ctx, id, commit); !errdefs.IsConflict(err) {
		t.Fatalf("remove held: %v", err)
	}
	release()
	release() // idempotent
	if m.Users(id) != 0 || !mounted(root) {
		t.Fatalf("after release: %d users, mounted %v", m.Users(id), mounted(root))
	}
	// A restarted server adopts the mount and reuses it.
	m2, err := New(data)
	if err != nil {
		t.Fatal(err)
	}
	root2, release2, err := m2.Acquire(id)
	if err != nil || root2 != root {
		t.Fatal(root2, err)
	}
	if b, err := os.ReadFile(filepath.Join(root2, "f")); err != nil || string(b) != "x" {
		t.Fatalf("read after adoption: %q, %v", b, err)
	}
	release2()
	if err := m2.Close(); err != nil || mounted(root) {
		t.Fatalf("close: %v, mounted %v", err, mounted(root))
	}
	if err := m2.Remove(ctx, id, commit); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "volumes", id)); !os.IsNotExist(err) {
		t.Fatalf("volume dir left: %v", err)
	}
	if _, _, err := m2.Acquire(id); !errdefs.IsNotFound(err) {
		t.Fatalf("acquire removed: %v", err)
	}
}
