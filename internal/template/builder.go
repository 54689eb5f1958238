package template

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/moatsh/moat/internal/template/catalog"
	"github.com/moatsh/moat/internal/template/progress"
	"github.com/moatsh/moat/internal/template/rootfs"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/store"
)

// Options configure one Build.
type Options struct {
	DataDir  string    // required; see Layout
	EnvdPath string    // required; see FindEnvd
	Out      io.Writer // human progress output; nil discards it
	Logger   *slog.Logger
	// Force rebuilds with mmdebstrap even when the cached rootfs matches.
	Force bool
	// NoAptCache disables the shared .deb cache.
	NoAptCache bool
	// Mmdebstrap is the binary to run; "" means "mmdebstrap" on PATH.
	Mmdebstrap string
	// Prepare, when set, is called by BuildFromImage and BuildFromTemplate
	// on the finished rootfs before it replaces the template's (on a cache
	// hit, on the rootfs in place), with the image's config (nil for
	// BuildFromTemplate); its error fails the build.
	Prepare func(rootfs string, img *oci.Config) error
}

// Result describes a finished build.
type Result struct {
	Name        string
	BuildID     string // changes whenever the rootfs content changed
	RootfsDir   string
	CacheKey    string
	Cached      bool // mmdebstrap was skipped: the rootfs matched the cache key
	EnvdUpdated bool // envd in the rootfs was replaced
	Duration    time.Duration
}

// stamp is stored next to the rootfs and describes it. It is removed before
// a rootfs is replaced and written after, so it never describes another one.
type stamp struct {
	CacheKey   string    `json:"cacheKey"`
	BuildID    string    `json:"buildID"`
	EnvdSHA256 string    `json:"envdSHA256"`
	BuiltAt    time.Time `json:"builtAt"`
}

// Build builds def into <DataDir>/templates/<name>/rootfs, or only refreshes
// envd when the existing rootfs was built from the same cache key. It needs
// root (mmdebstrap --mode=root) and serialises concurrent builds of the same
// template with a lock file.
func Build(ctx context.Context, def catalog.Definition, opts Options) (Result, error) {
	start := time.Now()
	if err := def.Validate(); err != nil {
		return Result{}, err
	}
	if opts.DataDir == "" || opts.EnvdPath == "" {
		return Result{}, errors.New("template build: DataDir and EnvdPath are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lay := Layout{DataDir: opts.DataDir}
	dir := lay.TemplateDir(def.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, fmt.Errorf("template %s: %w", def.Name, err)
	}
	unlock, err := rootfs.LockFile(lay.LockPath(def.Name))
	if err != nil {
		return Result{}, fmt.Errorf("template %s: lock: %w", def.Name, err)
	}
	defer unlock()
	removeStaleBuilds(dir, log)

	if dyn, err := rootfs.IsDynamic(opts.EnvdPath); err != nil {
		return Result{}, err
	} else if dyn {
		log.Warn("envd is dynamically linked; build it with CGO_ENABLED=0", "path", opts.EnvdPath)
	}
	envdSum, err := rootfs.FileSHA256(opts.EnvdPath)
	if err != nil {
		return Result{}, err
	}
	res := Result{Name: def.Name, RootfsDir: lay.RootfsDir(def.Name), CacheKey: def.CacheKey()}

	old, ok := readStamp(lay.StampPath(def.Name))
	if ok && old.CacheKey == res.CacheKey && !opts.Force && isDir(res.RootfsDir) {
		res.Cached = true
		res.BuildID = old.BuildID
		if err := refresh(res.RootfsDir, opts.EnvdPath, envdSum, &res); err != nil {
			return Result{}, fmt.Errorf("template %s: %w", def.Name, err)
		}
		log.Info("template cache hit", "template", def.Name, "envd_updated", res.EnvdUpdated)
	} else {
		res.BuildID = newBuildID()
		if err := fullBuild(ctx, def, lay, opts, log); err != nil {
			return Result{}, fmt.Errorf("template %s: %w", def.Name, err)
		}
	}
	st := stamp{CacheKey: res.CacheKey, BuildID: res.BuildID, EnvdSHA256: envdSum, BuiltAt: time.Now().UTC()}
	if err := writeStamp(lay.StampPath(def.Name), st); err != nil {
		return Result{}, fmt.Errorf("template %s: %w", def.Name, err)
	}
	res.Duration = time.Since(start)
	return res, nil
}

// refresh brings a cached rootfs up to date: envd (when its hash differs)
// and the static files. A changed envd gets a new build ID.
func refresh(dir, envdPath, envdSum string, res *Result) error {
	cur, err := rootfs.InstalledEnvdSHA256(dir)
	if err != nil {
		return err
	}
	if err := rootfs.Finalize(dir, envdPath); err != nil {
		return err
	}
	if cur != envdSum {
		res.EnvdUpdated = true
		res.BuildID = newBuildID()
	}
	return nil
}

// fullBuild runs mmdebstrap into a fresh work directory, finalizes the
// rootfs and swaps it into place.
func fullBuild(ctx context.Context, def catalog.Definition, lay Layout, opts Options, log *slog.Logger) error {
	dir := lay.TemplateDir(def.Name)
	work, err := os.MkdirTemp(dir, buildDirPattern)
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	defer func() {
		if err := rootfs.RemoveTree(work); err != nil {
			log.Error("remove build work dir", "dir", work, "err", err)
		}
	}()
	// MkdirTemp makes it 0700; apt's _apt user must reach the chroot below.
	if err := os.Chmod(work, 0o755); err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	steps, err := writeSteps(def, work)
	if err != nil {
		return err
	}
	aptCache := ""
	if !opts.NoAptCache && !strings.ContainsAny(lay.AptCacheDir(), " \t\n") {
		aptCache = lay.AptCacheDir()
		if err := os.MkdirAll(aptCache, 0o755); err != nil {
			return fmt.Errorf("apt cache: %w", err)
		}
	}
	target := filepath.Join(work, "rootfs")
	logf, err := os.Create(lay.BuildLogPath(def.Name))
	if err != nil {
		return fmt.Errorf("build log: %w", err)
	}
	defer logf.Close()

	bin := opts.Mmdebstrap
	if bin == "" {
		bin = "mmdebstrap"
	}
	prog := progress.New(opts.Out, fmt.Sprintf("building template %s (Debian %s, %d packages; log: %s)",
		def.Name, def.Suite, len(def.Packages), lay.BuildLogPath(def.Name)))
	// Host files are fetched first: a registry problem fails fast.
	hostFiles, err := fetchHostFiles(ctx, def, lay, prog)
	if err == nil {
		err = runLogged(ctx, prog, logf, bin, mmdebstrapArgs(def, target, steps, aptCache)...)
	}
	if err == nil && len(hostFiles) > 0 {
		prog.Line("I: installing host files")
		err = installHostFiles(target, def, hostFiles)
	}
	if err == nil {
		prog.Line("I: installing envd and static files")
		err = rootfs.Finalize(target, opts.EnvdPath)
	}
	prog.Close(err)
	if err != nil {
		return err
	}
	// The old stamp goes first: a crash between here and writeStamp leaves
	// no stamp, so the next build starts from scratch instead of trusting it.
	if err := os.Remove(lay.StampPath(def.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stamp: %w", err)
	}
	if err := rootfs.SwapDirs(target, lay.RootfsDir(def.Name)); err != nil {
		return fmt.Errorf("install rootfs: %w", err)
	}
	keepIfInUse(lay.RootfsDir(def.Name), target, log)
	log.Info("template built", "template", def.Name, "rootfs", lay.RootfsDir(def.Name))
	return nil
}

// keepIfInUse moves the replaced tree (now at old) aside when overlay mounts
// of running sandboxes still name dir (a rootfs) as lower layer: deleting a lower
// layer under a mounted overlay breaks those sandboxes. Later builds remove
// it once no sandbox uses the template.
func keepIfInUse(dir, old string, log *slog.Logger) {
	inUse, err := rootfs.InUseAsLowerdir(dir)
	if err == nil && !inUse {
		inUse, err = rootfs.InUseAsLowerdir(old)
	}
	if err == nil && !inUse {
		return
	}
	keep, err := os.MkdirTemp(filepath.Dir(dir), oldDirPattern)
	if err == nil {
		err = os.Rename(old, filepath.Join(keep, "rootfs"))
	}
	if err != nil {
		log.Warn("keep replaced rootfs for running sandboxes", "err", err)
		return
	}
	log.Info("running sandboxes use the replaced rootfs; kept until they are gone", "dir", keep)
}

// removeStaleBuilds removes work directories left by crashed builds (the
// caller holds the template lock, so none of them is in use) and replaced
// trees once no sandbox uses the template any more.
func removeStaleBuilds(dir string, log *slog.Logger) {
	stale, _ := filepath.Glob(filepath.Join(dir, buildDirPattern))
	if inUse, err := rootfs.InUseAsLowerdir(filepath.Join(dir, "rootfs")); err == nil && !inUse {
		old, _ := filepath.Glob(filepath.Join(dir, oldDirPattern))
		for _, o := range old {
			if inUse, err := rootfs.IsMountRoot(filepath.Join(o, "rootfs")); err == nil && !inUse {
				stale = append(stale, o)
			}
		}
	}
	for _, s := range stale {
		if err := rootfs.RemoveTree(s); err != nil {
			log.Warn("remove stale build dir", "dir", s, "err", err)
		}
	}
}

func readStamp(path string) (stamp, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return stamp{}, false
	}
	var s stamp
	if err := json.Unmarshal(b, &s); err != nil || s.CacheKey == "" {
		return stamp{}, false
	}
	return s, true
}

func writeStamp(path string, s stamp) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("write stamp: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write stamp: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write stamp: %w", err)
	}
	return nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func newBuildID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Registrar is the part of the store a build writes to.
type Registrar interface {
	UpsertTemplate(ctx context.Context, t store.Template) error
}

// Register records a finished build in the store. Built-in templates use
// their name as ID.
func Register(ctx context.Context, reg Registrar, def catalog.Definition, res Result) error {
	t := store.Template{
		ID:          def.Name,
		Name:        def.Name,
		BuildID:     res.BuildID,
		RootfsDir:   res.RootfsDir,
		CPUCount:    def.CPUCount,
		MemoryMB:    def.MemoryMB,
		DiskSizeMB:  def.DiskSizeMB,
		EnvdVersion: state.Version,
	}
	if err := reg.UpsertTemplate(ctx, t); err != nil {
		return fmt.Errorf("register template %s: %w", def.Name, err)
	}
	return nil
}
