package template

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	case !nameRE.MatchString(name):
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
	envdSum, err := hostFileSHA256(opts.EnvdPath)
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
		if err := removeTree(work); err != nil {
			log.Error("remove build work dir", "dir", work, "err", err)
		}
	}()
	target := filepath.Join(work, "rootfs")
	if err := copyTree(ctx, baseRootfs, target); err != nil {
		return Result{}, fmt.Errorf("template %s: copy base rootfs: %w", name, err)
	}
	if err := finalize(target, opts.EnvdPath); err != nil {
		return Result{}, fmt.Errorf("template %s: %w", name, err)
	}
	if opts.Prepare != nil {
		if err := opts.Prepare(target, nil); err != nil {
			return Result{}, err
		}
	}
	if err := os.MkdirAll(lay.TemplateDir(name), 0o755); err != nil {
		return Result{}, err
	}
	unlock, err := lockFile(lay.LockPath(name))
	if err != nil {
		return Result{}, fmt.Errorf("lock: %w", err)
	}
	defer unlock()
	removeStaleBuilds(lay.TemplateDir(name), log)
	res := Result{Name: name, RootfsDir: lay.RootfsDir(name), BuildID: newBuildID(), CacheKey: "derived:" + newBuildID()}
	if err := os.Remove(lay.StampPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Result{}, fmt.Errorf("remove stamp: %w", err)
	}
	if err := swapDirs(target, res.RootfsDir); err != nil {
		return Result{}, fmt.Errorf("install rootfs: %w", err)
	}
	keepIfInUse(res.RootfsDir, target, log)
	st := stamp{CacheKey: res.CacheKey, BuildID: res.BuildID, EnvdSHA256: envdSum, BuiltAt: time.Now().UTC()}
	if err := writeStamp(lay.StampPath(name), st); err != nil {
		return Result{}, err
	}
	res.Duration = time.Since(start)
	log.Info("template built from template", "template", name, "base", baseRootfs)
	return res, nil
}

// RemoveTemplateFiles deletes <DataDir>/templates/<name> unless running
// sandboxes still use its rootfs (errdefs.ErrFailedPrecondition then).
func RemoveTemplateFiles(dataDir, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("template name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	lay := Layout{DataDir: dataDir}
	if inUse, err := inUseAsLowerdir(lay.RootfsDir(name)); err != nil {
		return err
	} else if inUse {
		return fmt.Errorf("template %s: running sandboxes use it: %w", name, errdefs.ErrFailedPrecondition)
	}
	return removeTree(lay.TemplateDir(name))
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
func ValidName(name string) bool { return nameRE.MatchString(name) }
