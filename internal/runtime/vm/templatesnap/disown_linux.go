package templatesnap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// A template snapshot directory is owned like a sandbox directory while
// its boot's QEMU runs (see package launch), and root-owned afterwards:
// world-readable (disk.qcow2) or root-only (mem, state).

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
