package vm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/jail"
)

// Every QEMU runs jailed (see internal/jail): as the root ID of a host ID
// range of its own (idmap, recorded in the sandbox directory as
// idmap, so that resume and Recover find it), without capabilities, with
// no_new_privs, in a mount namespace showing its own directory
// (read-write), the kernel, initramfs and the read-only backing files of
// its disk, /usr and /dev/{null,zero,random,urandom,net/tun} (and kvm).
//
// Ownership in a sandbox directory: the directory is root:<gid> 01770, so
// QEMU can create its sockets and pidfile but, the sticky bit set, cannot
// remove or replace root's files (meta.json, idmap, state, log/ (the
// tmpfs of qemu.log), console.log); mem and disk.qcow2 are root:<gid> 0660. A template
// snapshot directory is the same during its boot and root-owned, world-
// readable (disk.qcow2) or root-only (mem, state) afterwards.

// sandboxIDs returns the ID range recorded in sandbox directory dir,
// allocating one for a directory without (made by an older version).
func (r *Runtime) sandboxIDs(dir string) (idmap.Range, error) {
	ids, err := idmap.Read(dir)
	if err == nil {
		return ids, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return idmap.Range{}, err
	}
	return r.ids.Allocate(dir)
}

// ownForQEMU lets the jailed QEMU of dir, running as ids' root, use dir
// and write the files in rw that exist (see the comment above).
func ownForQEMU(dir string, ids idmap.Range, rw ...string) error {
	gid := ids.Root()
	if err := os.Chown(dir, 0, gid); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if err := os.Chmod(dir, 0o770|os.ModeSticky); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	for _, f := range rw {
		err := os.Lchown(f, 0, gid)
		if errors.Is(err, os.ErrNotExist) { // QEMU creates it (a template boot's mem)
			continue
		}
		if err != nil {
			return fmt.Errorf("jail: %w", err)
		}
		if err := os.Chmod(f, 0o660); err != nil {
			return fmt.Errorf("jail: %w", err)
		}
	}
	return nil
}

// templateFiles are the entries a template snapshot directory keeps
// after its boot, with their modes (root-owned).
var templateFiles = map[string]os.FileMode{"disk.qcow2": 0o644, "mem": 0o600, "state": 0o600, "meta": 0o644,
	"console.log": 0o640, "console.log.1": 0o640}

// disownTemplate makes a template snapshot directory root's again once
// its boot's QEMU is gone: anything else that QEMU left goes, and every
// file must be a regular file (not a link it planted). Every sandbox's
// QEMU reads disk.qcow2 (its disk's backing file), nothing else.
func disownTemplate(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("template snapshot: %w", err)
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		mode, keep := templateFiles[e.Name()]
		if !keep {
			errs = append(errs, os.RemoveAll(p))
			continue
		}
		if !e.Type().IsRegular() {
			errs = append(errs, fmt.Errorf("%s is not a regular file", p))
			continue
		}
		errs = append(errs, os.Lchown(p, 0, 0), os.Chmod(p, mode))
	}
	errs = append(errs, os.Chown(dir, 0, 0), os.Chmod(dir, 0o755))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("template snapshot %s: %w", dir, err)
	}
	return nil
}

// jailConfig is the jail of m's QEMU running as ids' root in the network
// namespace nsPath.
func jailConfig(qemu, nsPath string, m *machine, ids idmap.Range) (*jail.Config, error) {
	dir := filepath.Dir(m.QMP)
	mounts := []jail.Mount{{Path: dir, Writable: true}, {Path: m.Kernel}, {Path: m.Initramfs},
		{Path: "/dev/net/tun", Writable: true, Device: true}}
	chain, err := backingChain(m.Disk)
	if err != nil {
		return nil, err
	}
	for _, p := range chain {
		mounts = append(mounts, jail.Mount{Path: p})
	}
	if err := readableByAll(append(chain, m.Kernel, m.Initramfs)...); err != nil {
		return nil, err
	}
	var groups []int
	if m.Accel == "kvm" {
		mounts = append(mounts, jail.Mount{Path: "/dev/kvm", Writable: true, Device: true})
		var st syscall.Stat_t
		if err := syscall.Stat("/dev/kvm", &st); err == nil {
			groups = append(groups, int(st.Gid))
		}
	}
	return &jail.Config{UID: ids.Root(), GID: ids.Root(), Groups: groups, NetNS: nsPath, Mounts: mounts,
		Dir: dir, Path: qemu, Args: m.args(), Env: []string{"PATH=/usr/bin:/bin"}}, nil
}

// readableByAll makes Moat's shared read-only files (kernel, initramfs,
// template disks) readable for every QEMU user, whatever umask wrote them;
// the data dir's own permissions keep host users out.
func readableByAll(paths ...string) error {
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("jail: %w", err)
		}
		if fi.Mode().Perm()&0o004 == 0 {
			if err := os.Chmod(p, fi.Mode().Perm()|0o444); err != nil {
				return fmt.Errorf("jail: %w", err)
			}
		}
	}
	return nil
}

// backingChain lists the backing files under the qcow2 image disk (not
// disk itself), nearest first, as QEMU will open them.
func backingChain(disk string) ([]string, error) {
	var chain []string
	for cur := disk; len(chain) < 8; {
		next, err := qcow2Backing(cur)
		if err != nil {
			return nil, err
		}
		if next == "" {
			return chain, nil
		}
		if !filepath.IsAbs(next) {
			next = filepath.Join(filepath.Dir(cur), next)
		}
		chain = append(chain, next)
		cur = next
	}
	return nil, fmt.Errorf("jail: %s: backing chain too long", disk)
}

// qcow2Backing reads the backing file name from a qcow2 header; "" for a
// file that is not qcow2 (a raw image) or has no backing file.
func qcow2Backing(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("jail: disk: %w", err)
	}
	defer f.Close()
	var h [20]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:4]) != "QFI\xfb" {
		return "", nil
	}
	off, size := binary.BigEndian.Uint64(h[8:16]), binary.BigEndian.Uint32(h[16:20])
	if off == 0 || size == 0 {
		return "", nil
	}
	if size > 1023 {
		return "", fmt.Errorf("jail: %s: backing file name of %d bytes", path, size)
	}
	name := make([]byte, size)
	if _, err := f.ReadAt(name, int64(off)); err != nil {
		return "", fmt.Errorf("jail: %s: backing file name: %w", path, err)
	}
	return string(name), nil
}
