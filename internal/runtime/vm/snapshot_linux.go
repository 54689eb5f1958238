package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime"
)

// snapshot is a template booted once and frozen right after envd answered,
// or a sandbox saved by Runtime.Snapshot (Fork).
type snapshot struct {
	Dir      string // disk.qcow2, mem, state
	Boot     *bootFiles
	Accel    string
	VCPUs    int
	MemMiB   int
	Template string // template build key
	// Fork: disk.qcow2 is a sandbox's own overlay (over its template's
	// disk), which restores copy instead of layering another overlay on it.
	Fork bool
}

func (s *snapshot) disk() string  { return filepath.Join(s.Dir, "disk.qcow2") }
func (s *snapshot) mem() string   { return filepath.Join(s.Dir, "mem") }
func (s *snapshot) state() string { return filepath.Join(s.Dir, "state") }

// templateKey names a template build: <name>-<stamp>, where stamp hashes
// the template's stamp.json when it has one, else the rootfs's and envd's
// modification times.
func templateKey(spec runtime.Spec) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, strings.ToLower(spec.TemplateID))
	if name == "" {
		name = "template"
	}
	if len(name) > 32 { // unix socket paths under the snapshot dir must stay < 108 bytes
		name = name[:32]
	}
	h := sha256.New()
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(spec.RootfsDir), "stamp.json")); err == nil {
		h.Write(b)
	} else {
		fmt.Fprintln(h, spec.RootfsDir)
		for _, p := range []string{spec.RootfsDir, filepath.Join(spec.RootfsDir, "usr/local/bin/envd")} {
			if fi, err := os.Stat(p); err == nil {
				fmt.Fprintln(h, fi.ModTime().UnixNano(), fi.Size())
			}
		}
	}
	return name + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// imageName is a template's disk image in its template directory. It is
// sized to the template's files plus imageFree (sandboxes grow it to
// their DiskMiB, see disk_linux.go), with 4 KiB blocks and an inode per
// 16 KiB whatever its size, so that grown disks get ext4's usual layout.
// Data dirs of versions that sized sandbox disks from the image keep
// their rootfs.ext4 (1 GiB free) for the snapshots built over it; new
// snapshots use this image.
const imageName = "rootfs-v2.ext4"

// ensureImage builds <tdir>/<imageName> from rootfs once.
func ensureImage(ctx context.Context, tdir, rootfs string, freeMiB int) (string, error) {
	img := filepath.Join(tdir, imageName)
	if _, err := os.Stat(img); err == nil {
		return img, nil
	}
	if err := os.MkdirAll(tdir, 0o755); err != nil {
		return "", fmt.Errorf("template image: %w", err)
	}
	used, files, err := dirSize(rootfs)
	if err != nil {
		return "", fmt.Errorf("template image: %w", err)
	}
	// used counts a block more per file than the files take; add the
	// inode tables (1/64), a journal and the free space asked for.
	usedMiB := used >> 20
	sizeMiB := usedMiB + usedMiB/64 + 64 + int64(freeMiB)
	tmp := img + ".tmp"
	var out []byte
	for try := 0; try < 2; try++ {
		_ = os.Remove(tmp)
		args := []string{"-q", "-F", "-L", "root", "-b", "4096", "-i", "16384", "-I", "256", "-E", "root_owner=0:0"}
		if need := files * 5 / 4; need > sizeMiB<<20/16384 {
			args = append(args, "-N", strconv.FormatInt(need, 10))
		}
		args = append(args, "-d", rootfs, tmp, fmt.Sprintf("%dM", sizeMiB))
		out, err = exec.CommandContext(ctx, "mkfs.ext4", args...).CombinedOutput()
		if err == nil || ctx.Err() != nil {
			break
		}
		sizeMiB += sizeMiB / 4 // the estimate was short: once more with room
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("mkfs.ext4 -d %s: %w: %s", rootfs, err, out)
	}
	if err := os.Rename(tmp, img); err != nil {
		return "", fmt.Errorf("template image: %w", err)
	}
	return img, nil
}

// dirSize is the bytes of the files under root plus a block each, and
// their number.
func dirSize(root string) (size, files int64, err error) {
	err = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := d.Info(); err == nil {
			size += fi.Size() + 4096
			files++
		}
		return nil
	})
	return size, files, err
}

// qcow2Overlay creates a copy-on-write overlay of backing.
func qcow2Overlay(ctx context.Context, backing, backingFmt, dst string) error {
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", backingFmt, "-b", backing, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("qemu-img create %s: %w: %s", dst, err, out)
	}
	return nil
}

// saveState freezes the guest and writes its device state (RAM stays in the
// shared memory file) to path.
func saveState(ctx context.Context, c *qmp.Client, path string) error {
	return migrateTo(ctx, c, path, true)
}

// migrateTo stops the guest and migrates it into the file path; with
// ignoreShared, RAM in shared memory backends is left out (x-ignore-shared).
func migrateTo(ctx context.Context, c *qmp.Client, path string, ignoreShared bool) error {
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

// incoming feeds path to a QEMU started with -incoming defer -S and waits
// until the device state is loaded; the guest stays stopped.
func incoming(ctx context.Context, c *qmp.Client, path string) error {
	return migrateFrom(ctx, c, path, true)
}

// migrateFrom is migrateTo's other end: it loads the file path into a QEMU
// waiting with -incoming defer and returns once it is loaded.
func migrateFrom(ctx context.Context, c *qmp.Client, path string, ignoreShared bool) error {
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
		st, err := vmStatus(ctx, c)
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
		if err := sleepCtx(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
}

// vmStatus is QEMU's run state ("running", "paused", "postmigrate", …).
func vmStatus(ctx context.Context, c *qmp.Client) (string, error) {
	var st struct {
		Status string `json:"status"`
	}
	if err := c.Execute(ctx, "query-status", nil, &st); err != nil {
		return "", err
	}
	return st.Status, nil
}

// setLink raises or cuts the guest's network link. The template is
// snapshotted link-down; a restore raises the link, which tells moat-vminit
// that it was restored (see guestinit.RestoredMarker).
func setLink(ctx context.Context, c *qmp.Client, up bool) error {
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
		if err := sleepCtx(ctx, 2*time.Millisecond); err != nil {
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
