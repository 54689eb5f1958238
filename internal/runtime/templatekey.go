package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
)

// TemplateKey names the template build a sandbox of spec starts from:
// <name>-<stamp>, where stamp hashes the template's stamp.json when it has
// one, else the rootfs's and envd's modification times. Backends key what
// they keep per build by it (the vm backend's images and snapshots, both
// backends' slots), so a rebuild never reuses a stale one.
func TemplateKey(spec Spec) string {
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
		for _, p := range []string{spec.RootfsDir, filepath.Join(spec.RootfsDir, EnvdPath)} {
			if fi, err := os.Stat(p); err == nil {
				fmt.Fprintln(h, fi.ModTime().UnixNano(), fi.Size())
			}
		}
	}
	return name + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// EnvdPath is where a template's root filesystem holds envd.
const EnvdPath = "usr/local/bin/envd"

// CheckRootfs is nil when spec's root filesystem holds envd (a file at
// EnvdPath), else ErrInvalidArgument naming the template's tree: what a
// backend's Create checks before it makes anything.
func CheckRootfs(spec Spec) error {
	if fi, err := os.Stat(filepath.Join(spec.RootfsDir, EnvdPath)); err != nil || fi.IsDir() {
		return fmt.Errorf("sandbox %s: template rootfs %q has no /%s: %w", spec.ID, spec.RootfsDir, EnvdPath, errdefs.ErrInvalidArgument)
	}
	return nil
}
