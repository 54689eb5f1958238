package image

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
)

// guestModules are loaded by the guest init in this order (each after its
// dependencies); built-in ones are skipped. virtio-mmio is how microvm
// attaches devices (found through ACPI with the Debian cloud kernel). The
// NFSv3 client (nfsv3 and what it needs: nfs, lockd, grace, sunrpc,
// nfs_acl, fscache, netfs) is how a guest mounts its sandbox's volumes
// (package volserver); it is loaded in every guest so that every template
// snapshot has it (a restored guest has no modules on disk to load).
var guestModules = []string{
	"virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "failover", "net_failover", "virtio_net",
	"rng_core", "virtio_rng", "ext4",
	"netfs", "fscache", "sunrpc", "grace", "lockd", "nfs_acl", "nfs", "nfsv3",
}

// requiredModules must be present as a module or built in.
var requiredModules = []string{"virtio_mmio", "virtio_blk", "virtio_net", "ext4", "sunrpc", "nfs", "nfsv3"}

// BootFiles is a prepared guest kernel and initramfs.
type BootFiles struct {
	Kernel    string // vmlinuz
	Initramfs string // uncompressed cpio
	Version   string
	Key       string // identifies kernel + initramfs content
}

// FindKernel picks the kernel: path when set, else the newest
// /boot/vmlinuz-*-cloud-amd64, else the newest /boot/vmlinuz-*.
func FindKernel(path string) (kernel, version string, err error) {
	if path != "" {
		v := strings.TrimPrefix(filepath.Base(path), "vmlinuz-")
		return path, v, nil
	}
	for _, pat := range []string{"/boot/vmlinuz-*-cloud-amd64", "/boot/vmlinuz-*"} {
		m, _ := filepath.Glob(pat)
		if len(m) > 0 {
			sort.Strings(m)
			k := m[len(m)-1]
			return k, strings.TrimPrefix(filepath.Base(k), "vmlinuz-"), nil
		}
	}
	return "", "", fmt.Errorf("no guest kernel in /boot (apt-get install linux-image-cloud-amd64): %w", errNoKernel)
}

// findInit locates the moat-vminit binary: path (vm.Settings.Init),
// next to the running executable, or on $PATH.
func findInit(path string) (string, error) {
	cands := []string{path}
	if exe, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(exe), "moat-vminit"))
	}
	if p, err := exec.LookPath("moat-vminit"); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if fi, err := os.Stat(c); c != "" && err == nil && fi.Mode().IsRegular() {
			return c, nil
		}
	}
	return "", fmt.Errorf("moat-vminit not found (CGO_ENABLED=0 go build -o <dir of moat>/moat-vminit ./cmd/moat-vminit, or moat serve --vminit PATH, env MOAT_VMINIT): %w", errNoInit)
}

// Missing host files of the guest boot (see Misconfigured).
var (
	errNoKernel = errors.New("no guest kernel")
	errNoInit   = errors.New("no guest init")
)

// Misconfigured turns an error preparing the guest's boot files into a
// server misconfiguration (errdefs.ErrInternal, 500) with a short public
// text. Nothing of err's chain survives but its text, kept for the log:
// a missing host file (os.ErrNotExist, a missing module) must never reach
// the client as NotFound, which the SDKs read as "sandbox not found".
func Misconfigured(err error) error {
	what := "guest kernel or init unusable"
	switch {
	case errors.Is(err, errNoInit):
		what = "guest init not found"
	case errors.Is(err, errNoKernel):
		what = "guest kernel not found"
	}
	return fmt.Errorf("%v: %w", err, errdefs.Publicf(errdefs.ErrInternal, "microVM runtime misconfigured: %s", what))
}

// moduleOrder resolves names against modDir's modules.dep into paths
// (relative to modDir) in load order: every module after its dependencies.
func moduleOrder(modDir string, names []string) ([]string, error) {
	deps, err := readModulesDep(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			builtin[modName(l)] = true
		}
	}
	byName := map[string]string{}
	for p := range deps {
		byName[modName(p)] = p
	}
	for _, r := range requiredModules {
		if byName[r] == "" && !builtin[r] {
			return nil, fmt.Errorf("kernel modules %s: no %s", modDir, r)
		}
	}
	var order []string
	seen := map[string]bool{}
	var visit func(p string)
	visit = func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		for _, d := range deps[p] {
			visit(d)
		}
		order = append(order, p)
	}
	for _, n := range names {
		if p := byName[n]; p != "" {
			visit(p)
		}
	}
	return order, nil
}

func modName(p string) string {
	b := filepath.Base(p)
	b = b[:len(b)-len(filepath.Ext(b))]
	b = strings.TrimSuffix(b, ".ko")
	return strings.ReplaceAll(b, "-", "_")
}

// readModulesDep parses "path: dep dep ..." lines.
func readModulesDep(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	defer f.Close()
	deps := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			deps[k] = strings.Fields(v)
		}
	}
	return deps, sc.Err()
}

// PrepareBoot copies the kernel and builds the initramfs under
// <cacheDir>/kernel, once per content.
func PrepareBoot(cacheDir, kernelPath, initPath string) (*BootFiles, error) {
	kernel, version, err := FindKernel(kernelPath)
	if err != nil {
		return nil, err
	}
	initBin, err := findInit(initPath)
	if err != nil {
		return nil, err
	}
	modDir := filepath.Join("/lib/modules", version)
	order, err := moduleOrder(modDir, guestModules)
	if err != nil {
		return nil, err
	}
	initData, err := os.ReadFile(initBin)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", initBin, err)
	}
	kfi, err := os.Stat(kernel)
	if err != nil {
		return nil, fmt.Errorf("guest kernel: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%d\n%d\n%s\n", kernel, kfi.Size(), kfi.ModTime().UnixNano(), strings.Join(order, ","))
	h.Write(initData)
	key := hex.EncodeToString(h.Sum(nil))[:12]
	dir := filepath.Join(cacheDir, "kernel", version+"-"+key)
	bf := &BootFiles{Kernel: filepath.Join(dir, "vmlinuz"), Initramfs: filepath.Join(dir, "initramfs.cpio"), Version: version, Key: key}
	if _, err := os.Stat(bf.Initramfs); err == nil {
		return bf, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(cacheDir), ".kernel-*")
	if err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := copyFile(kernel, filepath.Join(tmp, "vmlinuz")); err != nil {
		return nil, err
	}
	img, err := buildInitramfs(initData, modDir, order)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "initramfs.cpio"), img, 0o644); err != nil {
		return nil, fmt.Errorf("write initramfs: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(bf.Initramfs); serr != nil { // lost a race is fine
			return nil, fmt.Errorf("kernel cache: %w", err)
		}
	}
	return bf, nil
}

// buildInitramfs packs init, /dev/console and the modules (as
// /lib/modules/<name>.ko, listed in load order in /modules.order).
func buildInitramfs(initData []byte, modDir string, order []string) ([]byte, error) {
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	for _, d := range []string{"dev", "proc", "sys", "newroot", "lib", "lib/modules"} {
		c.Dir(d, 0o755)
	}
	c.CharDev("dev/console", 0o600, 5, 1)
	c.File("init", 0o755, initData)
	var list strings.Builder
	for _, rel := range order {
		if !strings.HasSuffix(rel, ".ko") {
			return nil, fmt.Errorf("module %s is compressed; only plain .ko is supported: %w", rel, errdefs.ErrNotImplemented)
		}
		b, err := os.ReadFile(filepath.Join(modDir, rel))
		if err != nil {
			return nil, fmt.Errorf("initramfs: %w", err)
		}
		name := "lib/modules/" + filepath.Base(rel)
		c.File(name, 0o644, b)
		list.WriteString("/" + name + "\n")
	}
	c.File("modules.order", 0o644, []byte(list.String()))
	if err := c.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	return nil
}
