package hostfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveDirFailsClosed: when the mount table cannot be read, RemoveDir
// removes nothing (it cannot tell whether a template or a volume is still
// mounted inside); with a readable table and nothing mounted it removes
// the directory.
func TestRemoveDirFailsClosed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sandbox")
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	real := mountPoints
	t.Cleanup(func() { mountPoints = real })
	mountPoints = func() ([]string, error) { return nil, errors.New("no /proc") }
	if err := RemoveDir(dir); err == nil {
		t.Fatal("RemoveDir went ahead without the mount table")
	}
	if _, err := os.Stat(filepath.Join(dir, "rootfs")); err != nil {
		t.Fatalf("the directory was touched: %v", err)
	}
	mountPoints = func() ([]string, error) { return []string{filepath.Join(dir, "rootfs")}, nil }
	if err := RemoveDir(dir); err == nil {
		t.Fatal("RemoveDir went ahead with rootfs mounted")
	}
	mountPoints = real
	if err := RemoveDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("directory left: %v", err)
	}
}
