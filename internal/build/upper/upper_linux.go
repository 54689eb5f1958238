package upper

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// runtimeFiles are written into every sandbox's upper dir by the runtime
// (names and resolvers of that sandbox), not by the build's commands:
// they never reach the template.
var runtimeFiles = map[string]bool{"etc/hosts": true, "etc/hostname": true, "etc/resolv.conf": true}

// IDShift maps the owners of a sandbox's upper dir (host IDs of its user
// namespace) back to the IDs inside it.
type IDShift struct {
	Host uint32 // host ID of the sandbox's root
	Size uint32
}

// overflowID owns what the sandbox could not have made (outside its range).
const overflowID = 65534

func (s IDShift) back(id uint32) int {
	if id >= s.Host && id-s.Host < s.Size {
		return int(id - s.Host)
	}
	return overflowID
}

// Apply writes the changes an overlay's upper dir records into
// rootfs, the overlay's lower layer: new and changed files, directories
// and symlinks (owners shifted back by ids, modes and file mtimes kept,
// hard links within the upper kept), whiteouts (a 0/0 character device)
// delete, opaque directories replace. The upper dir must not change
// meanwhile (the sandbox is frozen); it is walked without following
// symlinks, and every write into rootfs goes through os.Root, so nothing
// the sandbox planted leads outside rootfs. Extended attributes (file
// capabilities, ACLs) are not copied; device nodes, FIFOs and sockets the
// commands made are skipped and reported through skipped.
func Apply(upper, rootfs string, ids IDShift, skipped func(rel string)) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("open rootfs: %w", err)
	}
	defer root.Close()
	links := map[uint64]string{} // inode in upper -> first path written
	return filepath.WalkDir(upper, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(upper, path)
		if err != nil || rel == "." {
			return err
		}
		if runtimeFiles[filepath.ToSlash(rel)] {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat", rel)
		}
		uid, gid := ids.back(st.Uid), ids.back(st.Gid)
		mode := fi.Mode()
		// With redirect_dir or metacopy on, an upper entry can stand for
		// another lower path or lack its data: not a tree to copy.
		for _, x := range []string{"trusted.overlay.redirect", "trusted.overlay.metacopy"} {
			if _, err := lgetxattr(path, x); err == nil {
				return fmt.Errorf("%s carries %s (overlay redirect_dir/metacopy are on): cannot take the build's changes", rel, x)
			}
		}
		switch {
		case mode&fs.ModeCharDevice != 0 && st.Rdev == 0: // whiteout
			return removeAll(root, rel)
		case mode.IsDir():
			return upperDir(root, path, rel, uid, gid, mode)
		case mode&fs.ModeSymlink != 0:
			return upperSymlink(root, path, rel, uid, gid)
		case mode.IsRegular():
			if err := removeAll(root, rel); err != nil {
				return err
			}
			if st.Nlink > 1 {
				if first, ok := links[st.Ino]; ok {
					return root.Link(first, rel)
				}
				links[st.Ino] = rel
			}
			return copyFile(root, path, rel, uid, gid, fi)
		default:
			skipped(rel)
			return nil
		}
	})
}

// upperDir makes directory rel in root like the upper's at path: a
// non-directory there, or everything when the upper's is opaque, goes
// first; owner and mode follow.
func upperDir(root *os.Root, path, rel string, uid, gid int, mode fs.FileMode) error {
	opaque := false
	if v, err := lgetxattr(path, "trusted.overlay.opaque"); err == nil && v == "y" {
		opaque = true
	}
	if cur, err := root.Lstat(rel); err != nil || !cur.IsDir() || opaque {
		if err := removeAll(root, rel); err != nil {
			return err
		}
		if err := root.Mkdir(rel, 0o700); err != nil {
			return fmt.Errorf("mkdir %s: %w", rel, err)
		}
	}
	if err := root.Lchown(rel, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", rel, err)
	}
	return root.Chmod(rel, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
}

// upperSymlink replaces rel in root with the upper's symlink at path
// (its target stored, never followed).
func upperSymlink(root *os.Root, path, rel string, uid, gid int) error {
	target, err := os.Readlink(path)
	if err != nil {
		return err
	}
	if err := removeAll(root, rel); err != nil {
		return err
	}
	if err := root.Symlink(target, rel); err != nil {
		return fmt.Errorf("symlink %s: %w", rel, err)
	}
	return root.Lchown(rel, uid, gid)
}

// removeAll removes rel in root if it exists.
func removeAll(root *os.Root, rel string) error {
	if err := root.RemoveAll(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", rel, err)
	}
	return nil
}

func copyFile(root *os.Root, src, rel string, uid, gid int, fi fs.FileInfo) (retErr error) {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	defer func() {
		if err := out.Close(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	// Owner before mode: chown clears setuid/setgid bits.
	if err := out.Chown(uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", rel, err)
	}
	if err := out.Chmod(fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)); err != nil {
		return fmt.Errorf("chmod %s: %w", rel, err)
	}
	return root.Chtimes(rel, fi.ModTime(), fi.ModTime())
}

func lgetxattr(path, name string) (string, error) {
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(path, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
