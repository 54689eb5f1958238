package netpolicy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/testkit"
)

// ipNetnsAddFirstRun does what iproute2's `ip netns add` does to the netns
// directory before it mounts a namespace: make it shared, and when it is
// not a mount point yet, bind it onto itself (recursively) first.
func ipNetnsAddFirstRun(dir string) error {
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
}

// TestNetnsRemovableAfterIPNetnsAdd: a netns Moat mounted stays removable
// when an `ip netns add` runs afterwards — because New made the directory
// a shared mount point first. The control case (a plain directory) shows
// the failure it prevents: EBUSY, the namespace hidden under the new bind.
func TestNetnsRemovableAfterIPNetnsAdd(t *testing.T) {
	testkit.RequireRoot(t) // mount
	for _, tc := range []struct {
		name      string
		prepare   bool
		removable bool
	}{
		{"directory made a shared mount point first", true, true},
		{"plain directory (control)", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "netns")
			p := filepath.Join(dir, "moat-x")
			t.Cleanup(func() { // everything off dir, before TempDir's removal
				for range 4 {
					_ = unix.Unmount(p, unix.MNT_DETACH)
					_ = unix.Unmount(dir, unix.MNT_DETACH)
				}
				_ = os.Remove(p)
			})
			if tc.prepare {
				if err := sharedMountDir(dir); err != nil {
					t.Fatal(err)
				}
				if err := sharedMountDir(dir); err != nil { // idempotent: no second layer
					t.Fatal(err)
				}
				if n, err := mountsBelow(filepath.Dir(dir)); err != nil || n != 1 {
					t.Fatalf("mounts at %s: %d (%v), want 1", dir, n, err)
				}
			} else if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, nil, 0o444); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("/proc/self/ns/net", p, "bind", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			if err := ipNetnsAddFirstRun(dir); err != nil {
				t.Fatal(err)
			}
			err := removeMountFile(p)
			if tc.removable && err != nil {
				t.Fatalf("remove after ip netns add: %v", err)
			}
			if !tc.removable && !errors.Is(err, unix.EBUSY) {
				t.Fatalf("control: remove = %v, want EBUSY (else this test shows nothing)", err)
			}
			if n, _ := mountsBelow(dir); tc.removable && n != 0 {
				t.Fatalf("%d mounts left under %s", n, dir)
			}
		})
	}
}
