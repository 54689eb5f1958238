package template

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"github.com/moatsh/moat/internal/template/catalog"
	"github.com/moatsh/moat/internal/template/progress"
	"github.com/moatsh/moat/internal/template/rootfs"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// npmCacheDir holds one directory per fetched npm package version:
//
//	<DataDir>/cache/npm/<scope>+<name>@<version>/<package>.tgz
//	<DataDir>/cache/npm/<scope>+<name>@<version>/files/<member>
func (l Layout) npmCacheDir() string {
	return filepath.Join(l.DataDir, "cache", "npm")
}

// npmCacheEntry is the cache directory of one package spec. The exact
// version is part of the name, so a new version never reuses an old file.
func (l Layout) npmCacheEntry(spec string) string {
	return filepath.Join(l.npmCacheDir(), strings.ReplaceAll(strings.TrimPrefix(spec, "@"), "/", "+"))
}

// npmCommand is the npm client used to fetch host files; a variable for tests.
var npmCommand = "npm"

// fetchHostFiles makes every file of def available on the host and returns
// their host paths (same order as def.Files). Cached package versions are
// reused; others are fetched with `npm pack` (the host's npm configuration,
// registry and cache apply) and extracted in Go.
func fetchHostFiles(ctx context.Context, def catalog.Definition, lay Layout, prog *progress.Progress) ([]string, error) {
	out := make([]string, 0, len(def.Files))
	for _, f := range def.Files {
		p, err := fetchHostFile(ctx, f, lay, prog)
		if err != nil {
			return nil, fmt.Errorf("fetch %s (%s): %w", f.Name, f.NPM, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func fetchHostFile(ctx context.Context, f catalog.HostFile, lay Layout, prog *progress.Progress) (string, error) {
	entry := lay.npmCacheEntry(f.NPM)
	want := path.Base(f.Dest)
	if f.Member != "" {
		want = f.Member
	}
	cached := filepath.Join(entry, "files", filepath.FromSlash(want))
	if fi, err := os.Stat(cached); err == nil && fi.Mode().IsRegular() {
		prog.Line(fmt.Sprintf("I: %s: using cached %s", f.Name, f.NPM))
		return cached, nil
	}
	if err := os.MkdirAll(lay.npmCacheDir(), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(lay.npmCacheDir(), ".fetch-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	prog.Line(fmt.Sprintf("I: %s: npm pack %s", f.Name, f.NPM))
	cmd := exec.CommandContext(ctx, npmCommand, "pack", f.NPM, "--pack-destination", tmp,
		"--ignore-scripts", "--silent")
	cmd.Dir = tmp
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if _, err := cmd.Output(); err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return "", fmt.Errorf("npm pack (is npm installed? apt-get install npm, or Node.js): %w", err)
		}
		return "", fmt.Errorf("npm pack: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	tgzs, _ := filepath.Glob(filepath.Join(tmp, "*.tgz"))
	if len(tgzs) != 1 {
		return "", fmt.Errorf("npm pack wrote %d tarballs, want 1", len(tgzs))
	}
	dst := filepath.Join(tmp, "files", filepath.FromSlash(want))
	if err := extractNPMMember(tgzs[0], f.Member, path.Base(f.Dest), dst); err != nil {
		return "", err
	}
	// Publish the complete entry atomically; a concurrent fetch that won
	// the race is as good as ours.
	if err := os.Rename(tmp, entry); err != nil {
		if _, serr := os.Stat(cached); serr != nil {
			return "", fmt.Errorf("cache %s: %w", entry, err)
		}
	}
	if err := os.Chmod(entry, 0o755); err != nil {
		return "", err
	}
	prog.Line(fmt.Sprintf("I: %s: cached in %s", f.Name, entry))
	return cached, nil
}

// extractNPMMember copies one regular file out of an npm package tarball
// (entries live under "package/") to dst. With member "" it takes the
// executable file whose base name is base (the shallowest one).
func extractNPMMember(tgz, member, base, dst string) error {
	in, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer in.Close()
	gz, err := gzip.NewReader(in)
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Base(tgz), err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	var seen []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", filepath.Base(tgz), err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(path.Clean(h.Name), "/")
		// npm tarballs put everything in one top directory ("package/"
		// by convention; some use another name).
		rel := name
		if i := strings.IndexByte(name, '/'); i >= 0 {
			rel = name[i+1:]
		}
		seen = append(seen, rel)
		match := rel == member
		if member == "" {
			match = path.Base(rel) == base && h.FileInfo().Mode()&0o111 != 0
		}
		if !match {
			continue
		}
		return writeExtracted(tr, dst, h.Size)
	}
	what := fmt.Sprintf("member %q", member)
	if member == "" {
		what = fmt.Sprintf("an executable named %q", base)
	}
	return fmt.Errorf("%s has no %s (files: %s)", filepath.Base(tgz), what, strings.Join(seen, ", "))
}

func writeExtracted(r io.Reader, dst string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("short read: %d of %d bytes", n, size)
	}
	if err != nil {
		return fmt.Errorf("extract %s: %w", filepath.Base(dst), err)
	}
	return nil
}

// installHostFiles copies the fetched files (see fetchHostFiles) into the
// rootfs at dir.
func installHostFiles(dir string, def catalog.Definition, paths []string) error {
	if len(def.Files) == 0 {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("install host files: %w", err)
	}
	defer root.Close()
	for i, f := range def.Files {
		mode := f.Mode
		if mode == 0 {
			mode = 0o755
		}
		if err := rootfs.InstallFile(root, strings.TrimPrefix(f.Dest, "/"), paths[i], mode&fs.ModePerm); err != nil {
			return err
		}
	}
	return nil
}
