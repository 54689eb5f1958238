package rootfs

import (
	"fmt"
	"os"
)

// SandboxHostname is the hostname baked into every template.
const SandboxHostname = "sandbox"

// staticFiles are written into every rootfs after mmdebstrap. resolv.conf is
// a placeholder: runtimes bind-mount or rewrite it per sandbox. It is written
// here, not in a step, because mmdebstrap's own resolv.conf must stay in
// place while the steps run apt.
var staticFiles = []struct {
	name string
	data string
}{
	{"etc/hostname", SandboxHostname + "\n"},
	{"etc/hosts", "127.0.0.1\tlocalhost\n127.0.1.1\t" + SandboxHostname + "\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n"},
	{"etc/resolv.conf", "# Placeholder written by moat; the sandbox runtime replaces it.\n" +
		"nameserver 1.1.1.1\nnameserver 8.8.8.8\n"},
}

// Finalize installs envd and the static files into the rootfs at dir. It is
// idempotent and also used to refresh a cached rootfs. Like every writer
// of a rootfs it replaces files (unlink and create, or rename) and never
// writes into an existing file's inode: trees may share inodes with cached
// build layers (see package build).
func Finalize(dir, envdPath string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("Finalize rootfs: %w", err)
	}
	defer root.Close()
	for _, f := range staticFiles {
		if err := writeFile(root, f.name, []byte(f.data), 0o644); err != nil {
			return fmt.Errorf("Finalize rootfs: %w", err)
		}
	}
	if err := InstallFile(root, EnvdPathInRootfs, envdPath, 0o755); err != nil {
		return fmt.Errorf("Finalize rootfs: %w", err)
	}
	if err := root.MkdirAll("home/user", 0o750); err != nil {
		return fmt.Errorf("Finalize rootfs: %w", err)
	}
	// Only a real directory is chowned: a symlink or file there may be
	// an inode the tree shares with a cached layer (hard links), and
	// nothing writes into those.
	if fi, err := root.Lstat("home/user"); err == nil && fi.IsDir() {
		if err := root.Lchown("home/user", 1000, 1000); err != nil {
			return fmt.Errorf("Finalize rootfs: %w", err)
		}
	}
	return nil
}
