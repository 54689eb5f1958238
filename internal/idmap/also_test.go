package idmap

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAllocateSkipsOtherParents: ranges recorded under the also parents
// (another runtime's sandboxes) are not handed out again.
func TestAllocateSkipsOtherParents(t *testing.T) {
	root := t.TempDir()
	mine, theirs := filepath.Join(root, "vm"), filepath.Join(root, "containers")
	for _, d := range []string{mine, theirs, filepath.Join(theirs, "c1"), filepath.Join(mine, "v1")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewAllocator(theirs).Allocate(filepath.Join(theirs, "c1")); err != nil {
		t.Fatal(err)
	}
	a := NewAllocator(mine, theirs, filepath.Join(root, "missing"))
	r, err := a.Allocate(filepath.Join(mine, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Host != FirstHost+Size {
		t.Errorf("got %d, want the second range (the first is the container's)", r.Host)
	}
}
