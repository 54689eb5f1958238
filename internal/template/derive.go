package template

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/moatsh/moat/internal/template/catalog"
	"github.com/moatsh/moat/internal/template/rootfs"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// BuildFromTemplate makes template name from a copy of another template's
// root filesystem (E2B's fromTemplate): baseRootfs is copied (ownership,
// modes, links and xattrs kept; reflinks where the filesystem has them),
// envd and the static files are refreshed, and the copy is swapped into
// <DataDir>/templates/<name>/rootfs like Build. Nothing in the copy runs.
// Nothing is written under templates/ until the copy is complete.
func BuildFromTemplate(ctx context.Context, name, baseRootfs string, opts Options) (Result, error) {
	start := time.Now()
	switch {
	case !catalog.ValidName(name):
		return Result{}, fmt.Errorf("template name %q: want lower-case letters, digits, '.', '_', '-' (max 63): %w",
			name, errdefs.ErrInvalidArgument)
	case !isDir(baseRootfs):
		return Result{}, fmt.Errorf("template %s: base rootfs %s is missing: %w", name, baseRootfs, errdefs.ErrNotFound)
	case opts.DataDir == "" || opts.EnvdPath == "":
		return Result{}, errors.New("template build: DataDir and EnvdPath are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lay := Layout{DataDir: opts.DataDir}
	envdSum, err := rootfs.FileSHA256(opts.EnvdPath)
	if err != nil {
		return Result{}, err
	}
	// The work dir is on the data directory's filesystem (a rename moves
	// the result into place) and outside templates/ (a failed build leaves
	// no template directory).
	if err := os.MkdirAll(lay.imageWorkDir(), 0o700); err != nil {
		return Result{}, fmt.Errorf("create work dir: %w", err)
	}
	work, err := os.MkdirTemp(lay.imageWorkDir(), "derive-*")
	if err != nil {
		return Result{}, fmt.Errorf("create work dir: %w", err)
	}
	defer func() {
		if err := rootfs.RemoveTree(work); err != nil {
			log.Error("remove build work dir", "dir", work, "err", err)
		}
	}()
	target := filepath.Join(work, "rootfs")
	if err := CopyRootfs(ctx, baseRootfs, target, opts.EnvdPath); err != nil {
		return Result{}, fmt.Errorf("template %s: %w", name, err)
	}
	if opts.Prepare != nil {
		if err := opts.Prepare(target, nil); err != nil {
			return Result{}, err
		}
	}
	res, err := Install(name, target, InstallOptions{DataDir: opts.DataDir, Logger: log,
		CacheKey: "derived:" + newBuildID(), EnvdSHA256: envdSum})
	if err != nil {
		return Result{}, err
	}
	res.Duration = time.Since(start)
	log.Info("template built from template", "template", name, "base", baseRootfs)
	return res, nil
}

// CopyRootfs copies the root filesystem src to dst (which must not exist;
// see copyTree) and installs envd and the static files into the copy.
func CopyRootfs(ctx context.Context, src, dst, envdPath string) error {
	if err := copyTree(ctx, src, dst); err != nil {
		return fmt.Errorf("copy base rootfs: %w", err)
	}
	return rootfs.Finalize(dst, envdPath)
}

// InstalledCacheKey is the cache key the stamp of template name records
// for its current rootfs ("" when it has none or no rootfs).
func InstalledCacheKey(dataDir, name string) string {
	lay := Layout{DataDir: dataDir}
	st, ok := readStamp(lay.StampPath(name))
	if !ok || !isDir(lay.RootfsDir(name)) {
		return ""
	}
	return st.CacheKey
}

// InstallOptions describe a finished root filesystem for Install.
type InstallOptions struct {
	DataDir    string // required
	Logger     *slog.Logger
	CacheKey   string     // what the tree was made from, recorded in the stamp
	EnvdSHA256 string     // of the envd in the tree
	Image      *ImageInfo // the image it came from, recorded in image.json; nil removes an old one
}

// Install makes tree, a complete root filesystem on the data directory's
// filesystem, the rootfs of template name: under the template's lock it
// is swapped into <DataDir>/templates/<name>/rootfs (readers never see it
// missing) with a new build ID and stamp. The replaced rootfs ends up at
// tree for the caller to remove or, while sandboxes use it, beside the
// new one until a later build removes it. Install writes nothing into the
// tree, which may share its files' inodes with cached layers (hard links):
// an installed rootfs is only ever read (a read-only lower dir, the
// source of a VM image).
func Install(name, tree string, o InstallOptions) (Result, error) {
	if !catalog.ValidName(name) {
		return Result{}, fmt.Errorf("template name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lay := Layout{DataDir: o.DataDir}
	if err := os.MkdirAll(lay.TemplateDir(name), 0o755); err != nil {
		return Result{}, err
	}
	unlock, err := rootfs.LockFile(lay.LockPath(name))
	if err != nil {
		return Result{}, fmt.Errorf("lock: %w", err)
	}
	defer unlock()
	removeStaleBuilds(lay.TemplateDir(name), log)
	res := Result{Name: name, RootfsDir: lay.RootfsDir(name), BuildID: newBuildID(), CacheKey: o.CacheKey}
	// No stamp while the rootfs is being replaced (see fullBuild).
	if err := os.Remove(lay.StampPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Result{}, fmt.Errorf("remove stamp: %w", err)
	}
	if err := rootfs.SwapDirs(tree, res.RootfsDir); err != nil {
		return Result{}, fmt.Errorf("install rootfs: %w", err)
	}
	keepIfInUse(res.RootfsDir, tree, log)
	if o.Image != nil {
		ir := ImageResult{Result: res, Image: *o.Image}
		return res, writeImageState(lay, name, &ir, o.EnvdSHA256)
	}
	if err := os.Remove(lay.ImageInfoPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Result{}, fmt.Errorf("remove image info: %w", err)
	}
	st := stamp{CacheKey: res.CacheKey, BuildID: res.BuildID, EnvdSHA256: o.EnvdSHA256, BuiltAt: time.Now().UTC()}
	return res, writeStamp(lay.StampPath(name), st)
}

// copyTree copies the directory src to dst (which must not exist) with
// cp -a: the copy keeps owners, modes, hard links, special files and
// xattrs, and cp never follows the tree's symlinks. It only copies; nothing
// from the tree is executed.
func copyTree(ctx context.Context, src, dst string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", "--", src, dst)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cp: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// ValidName reports whether name can name a template (and its directory).
func ValidName(name string) bool { return catalog.ValidName(name) }
