package netpolicy

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/mountinfo"
)

// sharedMountDir makes dir a mount point of its own with shared
// propagation, as `ip netns add` makes /run/netns the first time it runs.
// Left a plain directory, dir would be bind-mounted onto itself by the
// next `ip netns add` (an operator's, a test's), which hides every netns
// Moat had mounted in it beneath the new mount: unmounting through the
// path then no longer reaches them and their removal fails with EBUSY
// (the namespaces, and their veths, would leak). Done under a lock on the
// directory, so that two servers starting at once do not stack two
// mounts. When dir is not a mount point yet but already holds mounts
// (sandboxes of an older version), it is left alone: a bind now would
// hide exactly those.
func sharedMountDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	err = unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if !errors.Is(err, unix.EINVAL) {
		return err // nil: already a mount point, now shared
	}
	if below, err := mountsBelow(dir); err != nil || below > 0 {
		return err
	}
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", dir, err)
	}
	return unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
}

// mountsBelow counts the mounts of this mount namespace under dir.
func mountsBelow(dir string) (int, error) {
	points, err := mountinfo.Points()
	n, prefix := 0, strings.TrimSuffix(dir, "/")+"/"
	for _, mp := range points {
		if strings.HasPrefix(mp, prefix) {
			n++
		}
	}
	return n, err
}
