package rootfs

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// EnvdPathInRootfs is where every template carries the in-sandbox agent.
const EnvdPathInRootfs = "usr/local/bin/envd"

// IsDynamic reports whether the ELF file at path needs a program
// interpreter, i.e. is not a static binary.
func IsDynamic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("read envd %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

func fileSHA256(open func() (io.ReadCloser, error)) (string, error) {
	f, err := open()
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func FileSHA256(path string) (string, error) {
	sum, err := fileSHA256(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return sum, nil
}

// rootfsFileSHA256 hashes name inside root; "" if it does not exist.
func rootfsFileSHA256(root *os.Root, name string) (string, error) {
	sum, err := fileSHA256(func() (io.ReadCloser, error) { return root.Open(name) })
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("hash %s in rootfs: %w", name, err)
	}
	return sum, nil
}

// InstallFile copies src into root at name with mode, replacing any previous
// file atomically (temp file + rename inside the rootfs). os.Root keeps every
// path inside the rootfs even if it contains symlinks.
func InstallFile(root *os.Root, name, src string, mode fs.FileMode) (retErr error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("install %s: %w", name, err)
	}
	defer in.Close()
	if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("install %s: %w", name, err)
	}
	tmp := name + ".moat-tmp"
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("install %s: %w", name, err)
	}
	defer func() {
		if retErr != nil {
			_ = root.Remove(tmp)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("install %s: %w", name, err)
	}
	if err := out.Chmod(mode); err != nil { // not subject to umask
		out.Close()
		return fmt.Errorf("install %s: %w", name, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("install %s: %w", name, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		return fmt.Errorf("install %s: %w", name, err)
	}
	return nil
}

// writeFile replaces name inside root with data (never following a symlink
// that name may be, e.g. /etc/resolv.conf on some systems).
func writeFile(root *os.Root, name string, data []byte, mode fs.FileMode) error {
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := root.WriteFile(name, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// InstalledEnvdSHA256 is the hex sha256 of the envd in the rootfs at
// dir; "" when it has none.
func InstalledEnvdSHA256(rootfs string) (string, error) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return "", fmt.Errorf("open rootfs: %w", err)
	}
	defer root.Close()
	return rootfsFileSHA256(root, EnvdPathInRootfs)
}
