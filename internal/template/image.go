package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/moatsh/moat/internal/template/catalog"
	"github.com/moatsh/moat/internal/template/progress"
	"github.com/moatsh/moat/internal/template/rootfs"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/oci"
)

// ImageSource is an OCI image a template starts from instead of a Debian
// suite (E2B's fromImage / fromImageRegistry).
type ImageSource struct {
	Ref         string           // e.g. "docker.io/library/python:3.12"
	Credentials *oci.Credentials // nil: anonymous
	Platform    string           // "" means oci.DefaultPlatform
	Insecure    bool             // plain HTTP to a non-local registry
	MaxSize     int64            // uncompressed size cap; 0 means oci.DefaultMaxSize
}

// ImageInfo is what a template built from an image remembers about it,
// stored in <DataDir>/templates/<name>/image.json: the process defaults
// (Env, WorkingDir, User, Entrypoint/Cmd) for later use, and the account
// the build added.
type ImageInfo struct {
	Ref      string         `json:"ref"`
	Digest   string         `json:"digest"`
	Platform string         `json:"platform"`
	Config   oci.Config     `json:"config"`
	User     rootfs.Account `json:"user"`
}

// ImageResult describes a finished BuildFromImage.
type ImageResult struct {
	Result Result
	Image  ImageInfo
}

// imageBuildVersion is part of the cache key of image templates; bump it
// when rootfs.FinalizeImage changes what it writes.
const imageBuildVersion = 1

// OCICacheDir holds image blobs shared by all image builds (see package oci).
func (l Layout) OCICacheDir() string {
	return filepath.Join(l.DataDir, "cache", "oci")
}

// ImageInfoPath is the ImageInfo of a template built from an image.
func (l Layout) ImageInfoPath(name string) string {
	return filepath.Join(l.TemplateDir(name), "image.json")
}

// imageWorkDir holds unpacks in progress. It is on the data directory's
// filesystem, so a finished rootfs moves into place with a rename, and
// outside templates/, so a failed build leaves no template directory.
func (l Layout) imageWorkDir() string {
	return filepath.Join(l.OCICacheDir(), "work")
}

// BuildFromImage makes template name from an OCI image: it pulls src (blobs
// cached under Layout.OCICacheDir), unpacks it, adds envd, the sandbox user
// and the static files, and swaps the result into
// <DataDir>/templates/<name>/rootfs like Build. When the image digest is the
// one the existing rootfs came from, only envd and the added files are
// refreshed. Nothing is written under templates/ until the rootfs is
// complete. Errors carry the kinds of oci.Pull and oci.Unpack.
func BuildFromImage(ctx context.Context, name string, src ImageSource, opts Options) (ImageResult, error) {
	start := time.Now()
	switch {
	case !catalog.ValidName(name):
		return ImageResult{}, fmt.Errorf("template name %q: want lower-case letters, digits, '.', '_', '-' (max 63): %w",
			name, errdefs.ErrInvalidArgument)
	case src.Ref == "":
		return ImageResult{}, fmt.Errorf("template %s: image reference is empty: %w", name, errdefs.ErrInvalidArgument)
	case opts.DataDir == "" || opts.EnvdPath == "":
		return ImageResult{}, errors.New("template build: DataDir and EnvdPath are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lay := Layout{DataDir: opts.DataDir}
	if dyn, err := rootfs.IsDynamic(opts.EnvdPath); err != nil {
		return ImageResult{}, err
	} else if dyn {
		log.Warn("envd is dynamically linked; build it with CGO_ENABLED=0", "path", opts.EnvdPath)
	}
	envdSum, err := rootfs.FileSHA256(opts.EnvdPath)
	if err != nil {
		return ImageResult{}, err
	}
	prog := progress.New(opts.Out, fmt.Sprintf("building template %s from image %s", name, src.Ref))
	img, err := pullImage(ctx, lay, src, log)
	if err != nil {
		prog.Close(err)
		return ImageResult{}, fmt.Errorf("template %s: %w", name, err)
	}
	prog.Line(fmt.Sprintf("I: image %s (%d layers)", img.Digest, len(img.Layers)))
	res := ImageResult{
		Result: Result{Name: name, RootfsDir: lay.RootfsDir(name), CacheKey: imageCacheKey(img)},
		Image:  ImageInfo{Ref: img.Ref, Digest: img.Digest, Platform: img.Platform, Config: img.Config},
	}
	err = buildImageRootfs(ctx, name, src, img, lay, opts, envdSum, &res, prog, log)
	prog.Close(err)
	if err != nil {
		return ImageResult{}, fmt.Errorf("template %s: %w", name, err)
	}
	res.Result.Duration = time.Since(start)
	return res, nil
}

func pullImage(ctx context.Context, lay Layout, src ImageSource, log *slog.Logger) (*oci.Image, error) {
	popts := []oci.PullOpt{oci.WithPullLogger(log)}
	if src.Credentials != nil {
		popts = append(popts, oci.WithCredentials(*src.Credentials))
	}
	if src.Platform != "" {
		popts = append(popts, oci.WithPlatform(src.Platform))
	}
	if src.Insecure {
		popts = append(popts, oci.WithInsecure())
	}
	if src.MaxSize > 0 {
		popts = append(popts, oci.WithMaxDownload(src.MaxSize))
	}
	return oci.Pull(ctx, src.Ref, lay.OCICacheDir(), popts...)
}

// buildImageRootfs unpacks (or, on a cache hit, refreshes) the rootfs and
// records stamp and image info.
func buildImageRootfs(ctx context.Context, name string, src ImageSource, img *oci.Image, lay Layout,
	opts Options, envdSum string, res *ImageResult, prog *progress.Progress, log *slog.Logger) error {
	old, ok := readStamp(lay.StampPath(name))
	if ok && old.CacheKey == res.Result.CacheKey && !opts.Force && isDir(res.Result.RootfsDir) {
		unlock, err := rootfs.LockFile(lay.LockPath(name))
		if err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		defer unlock()
		res.Result.Cached = true
		res.Result.BuildID = old.BuildID
		cur, err := rootfs.InstalledEnvdSHA256(res.Result.RootfsDir)
		if err != nil {
			return err
		}
		if res.Image.User, err = rootfs.FinalizeImage(res.Result.RootfsDir, opts.EnvdPath); err != nil {
			return err
		}
		if opts.Prepare != nil {
			if err := opts.Prepare(res.Result.RootfsDir, &img.Config); err != nil {
				return err
			}
		}
		if cur != envdSum {
			res.Result.EnvdUpdated = true
			res.Result.BuildID = newBuildID()
		}
		log.Info("template cache hit", "template", name, "image", img.Digest, "envd_updated", res.Result.EnvdUpdated)
		return writeImageState(lay, name, res, envdSum)
	}

	if err := os.MkdirAll(lay.imageWorkDir(), 0o755); err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	work, err := os.MkdirTemp(lay.imageWorkDir(), "build-*")
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	defer func() {
		if err := rootfs.RemoveTree(work); err != nil {
			log.Error("remove build work dir", "dir", work, "err", err)
		}
	}()
	target := filepath.Join(work, "rootfs")
	if err := os.Mkdir(target, 0o755); err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	prog.Line("I: unpacking layers; installing envd and the sandbox user")
	if res.Image.User, err = UnpackImage(ctx, img, target, src.MaxSize, opts.EnvdPath, log); err != nil {
		return err
	}
	if opts.Prepare != nil {
		if err := opts.Prepare(target, &img.Config); err != nil {
			return err
		}
	}
	r, err := Install(name, target, InstallOptions{DataDir: opts.DataDir, Logger: log,
		CacheKey: res.Result.CacheKey, EnvdSHA256: envdSum, Image: &res.Image})
	if err != nil {
		return err
	}
	res.Result.BuildID = r.BuildID
	log.Info("template built from image", "template", name, "image", img.Digest, "rootfs", lay.RootfsDir(name))
	return nil
}

func writeImageState(lay Layout, name string, res *ImageResult, envdSum string) error {
	b, err := json.MarshalIndent(res.Image, "", "  ")
	if err != nil {
		return err
	}
	tmp := lay.ImageInfoPath(name) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write image info: %w", err)
	}
	if err := os.Rename(tmp, lay.ImageInfoPath(name)); err != nil {
		return fmt.Errorf("write image info: %w", err)
	}
	st := stamp{CacheKey: res.Result.CacheKey, BuildID: res.Result.BuildID, EnvdSHA256: envdSum, BuiltAt: time.Now().UTC()}
	return writeStamp(lay.StampPath(name), st)
}

// ReadImageInfo returns what BuildFromImage recorded for template name;
// errdefs.ErrNotFound if it was not built from an image.
func ReadImageInfo(dataDir, name string) (ImageInfo, error) {
	b, err := os.ReadFile(Layout{DataDir: dataDir}.ImageInfoPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return ImageInfo{}, fmt.Errorf("template %s: no image info: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return ImageInfo{}, err
	}
	var info ImageInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return ImageInfo{}, fmt.Errorf("template %s: image info: %w", name, err)
	}
	return info, nil
}

// imageCacheKey names the rootfs an image produces: its manifest digest
// and platform, and what rootfs.FinalizeImage adds.
func imageCacheKey(img *oci.Image) string {
	b, _ := json.Marshal(struct {
		Version  int
		Image    int
		Digest   string
		Platform string
	}{catalog.BuildScriptVersion, imageBuildVersion, img.Digest, img.Platform})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// PullImage resolves src and makes its blobs available in the data
// directory's image cache (see package oci), without unpacking anything.
// Errors carry the kinds of oci.Pull.
func PullImage(ctx context.Context, dataDir string, src ImageSource, log *slog.Logger) (*oci.Image, error) {
	if src.Ref == "" {
		return nil, fmt.Errorf("image reference is empty: %w", errdefs.ErrInvalidArgument)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return pullImage(ctx, Layout{DataDir: dataDir}, src, log)
}

// ImageCacheKey names what an image becomes once unpacked and finalized
// (its manifest digest and platform, and the version of what
// rootfs.FinalizeImage adds), without envd, whose hash the caller adds.
func ImageCacheKey(img *oci.Image) string { return imageCacheKey(img) }

// UnpackImage unpacks img (pulled with PullImage) into dst, an existing
// empty directory, and makes it a sandbox rootfs like BuildFromImage:
// base directories, static files, envd and the sandbox user, without
// running anything in it. maxSize caps the unpacked size (0:
// oci.DefaultMaxSize).
func UnpackImage(ctx context.Context, img *oci.Image, dst string, maxSize int64, envdPath string, log *slog.Logger) (rootfs.Account, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	uopts := []oci.UnpackOpt{oci.WithUnpackLogger(log)}
	if maxSize > 0 {
		uopts = append(uopts, oci.WithMaxSize(maxSize))
	}
	if _, err := oci.Unpack(ctx, img.Layers, dst, uopts...); err != nil {
		return rootfs.Account{}, err
	}
	return rootfs.FinalizeImage(dst, envdPath)
}
