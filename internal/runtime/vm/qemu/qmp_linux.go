package qemu

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/qmp"
)

// SaveState freezes the guest and writes its device state (RAM stays in the
// shared memory file) to path.
func SaveState(ctx context.Context, c *qmp.Client, path string) error {
	return MigrateTo(ctx, c, path, true)
}

// MigrateTo stops the guest and migrates it into the file path; with
// ignoreShared, RAM in shared memory backends is left out (x-ignore-shared).
func MigrateTo(ctx context.Context, c *qmp.Client, path string, ignoreShared bool) error {
	if err := c.Execute(ctx, "stop", nil, nil); err != nil {
		return err
	}
	if err := setCapability(ctx, c, "x-ignore-shared", ignoreShared); err != nil {
		return err
	}
	// QEMU can create entries in its directory: a new root-owned file,
	// never a file or link it left there.
	_ = os.Remove(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	defer f.Close()
	if err := c.ExecuteFile(ctx, "getfd", map[string]any{"fdname": "state"}, nil, f); err != nil {
		return err
	}
	if err := c.Execute(ctx, "migrate", map[string]any{"uri": "fd:state"}, nil); err != nil {
		return err
	}
	return waitMigration(ctx, c, "query-migrate")
}

// Incoming feeds path to a QEMU started with -incoming defer -S and waits
// until the device state is loaded; the guest stays stopped.
func Incoming(ctx context.Context, c *qmp.Client, path string) error {
	return MigrateFrom(ctx, c, path, true)
}

// MigrateFrom is MigrateTo's other end: it loads the file path into a QEMU
// waiting with -incoming defer and returns once it is loaded.
func MigrateFrom(ctx context.Context, c *qmp.Client, path string, ignoreShared bool) error {
	if err := setCapability(ctx, c, "x-ignore-shared", ignoreShared); err != nil {
		return err
	}
	f, err := openRootFile(path)
	if err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	defer f.Close()
	if err := c.ExecuteFile(ctx, "getfd", map[string]any{"fdname": "state"}, nil, f); err != nil {
		return err
	}
	if err := c.Execute(ctx, "migrate-incoming", map[string]any{"uri": "fd:state"}, nil); err != nil {
		return err
	}
	for {
		st, err := Status(ctx, c)
		if err != nil {
			return err
		}
		switch st {
		case "inmigrate":
		case "paused", "postmigrate", "prelaunch":
			return nil
		default:
			return fmt.Errorf("restore: vm status %q", st)
		}
		if err := Sleep(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
}

// Status is QEMU's run state ("running", "paused", "postmigrate", …).
func Status(ctx context.Context, c *qmp.Client) (string, error) {
	var st struct {
		Status string `json:"status"`
	}
	if err := c.Execute(ctx, "query-status", nil, &st); err != nil {
		return "", err
	}
	return st.Status, nil
}

// SetLink raises or cuts the guest's network link. The template is
// snapshotted link-down; a restore raises the link, which tells moat-vminit
// that it was restored (see guestinit.RestoredMarker).
func SetLink(ctx context.Context, c *qmp.Client, up bool) error {
	return c.Execute(ctx, "set_link", map[string]any{"name": "n0", "up": up}, nil)
}

// setCapability turns a migration capability on or off.
func setCapability(ctx context.Context, c *qmp.Client, name string, on bool) error {
	return c.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": []map[string]any{
		{"capability": name, "state": on}}}, nil)
}

func waitMigration(ctx context.Context, c *qmp.Client, query string) error {
	for {
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := c.Execute(ctx, query, nil, &st); err != nil {
			return err
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("migration %s: %s", st.Status, st.ErrorDesc)
		}
		if err := Sleep(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("migration: %w", err)
		}
	}
}

// openRootFile opens path for reading if it is a regular file owned by
// root, not through a symlink: a file in a directory a jailed QEMU can
// write to that Moat hands to QEMU must be Moat's own.
func openRootFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Uid != 0 {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file of root's", path)
	}
	return f, nil
}

func Sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// GrowDisk enlarges the running guest's disk to size bytes; the guest
// grows its root file system on its own (see image/disk_linux.go).
func GrowDisk(ctx context.Context, c *qmp.Client, size int64) error {
	if err := c.Execute(ctx, "block_resize", map[string]any{"device": "d0", "size": size}, nil); err != nil {
		return fmt.Errorf("block_resize to %d MiB: %w", size>>20, err)
	}
	return nil
}
