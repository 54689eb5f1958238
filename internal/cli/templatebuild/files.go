package templatebuild

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// contextFiles are the files of one COPY source in the build context: the
// matches of src (a path or a glob, relative to dir) and, for directories,
// everything below them, sorted by path as the SDK sorts them.
type contextFiles struct {
	dir   string   // the context directory
	rel   []string // slash-separated paths relative to dir
	hash  string   // the SDK's files hash of "COPY src dest" and the files
	Bytes int64
}

// collectFiles resolves a COPY source in the context dir and hashes it
// like the SDK's calculateFilesHash: "COPY <src> <dest>", then per entry
// its relative path, its st_mode and st_size as decimal strings and its
// bytes (a symlink's target instead; links are not followed).
// Paths that ignore (the context's .dockerignore; nil = none) matches are
// left out, as the SDK leaves them out.
func collectFiles(dir, src, dest string, ignore *patternmatcher.PatternMatcher) (*contextFiles, error) {
	matches, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(src)))
	if err != nil {
		return nil, fmt.Errorf("COPY %s: %w", src, err)
	}
	seen := map[string]bool{}
	for _, m := range matches {
		if err := filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				return fmt.Errorf("%s is outside the context directory", p)
			}
			if ignore != nil && rel != "." {
				if skip, err := ignore.MatchesOrParentMatches(rel); err != nil || skip {
					return err
				}
			}
			seen[filepath.ToSlash(rel)] = true
			return nil
		}); err != nil {
			return nil, fmt.Errorf("COPY %s: %w", src, err)
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("COPY %s: no files found in %s", src, filepath.Join(dir, src))
	}
	cf := &contextFiles{dir: dir}
	for r := range seen {
		cf.rel = append(cf.rel, r)
	}
	sort.Strings(cf.rel)
	h := sha256.New()
	fmt.Fprintf(h, "COPY %s %s", src, dest)
	for _, r := range cf.rel {
		if err := cf.hashEntry(h, r); err != nil {
			return nil, fmt.Errorf("COPY %s: %w", src, err)
		}
	}
	cf.hash = hex.EncodeToString(h.Sum(nil))
	return cf, nil
}

func (cf *contextFiles) hashEntry(h io.Writer, rel string) error {
	p := filepath.Join(cf.dir, filepath.FromSlash(rel))
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	io.WriteString(h, rel)
	io.WriteString(h, strconv.FormatUint(uint64(statMode(fi.Mode())), 10))
	io.WriteString(h, strconv.FormatInt(fi.Size(), 10))
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		io.WriteString(h, target)
	case fi.Mode().IsRegular():
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		cf.Bytes += n
	}
	return nil
}

// readDockerignore reads the context's .dockerignore; nil when it has none.
func readDockerignore(dir string) (*patternmatcher.PatternMatcher, error) {
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	return pm, nil
}

// statMode is a FileMode as the st_mode Node's fs.stat reports.
func statMode(m fs.FileMode) uint32 {
	v := uint32(m.Perm())
	switch {
	case m&fs.ModeDir != 0:
		v |= 0o040000
	case m&fs.ModeSymlink != 0:
		v |= 0o120000
	default:
		v |= 0o100000
	}
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return v
}

// archive writes the files as a gzipped tar (paths relative to the
// context dir, owned by root; the build sets the owner) into a temporary
// file and returns its path; the caller removes it.
func (cf *contextFiles) archive() (path string, retErr error) {
	f, err := os.CreateTemp("", "moat-context-*.tar.gz")
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := f.Close(); retErr == nil {
			retErr = cerr
		}
		if retErr != nil {
			os.Remove(f.Name())
		}
	}()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, r := range cf.rel {
		if err := cf.addEntry(tw, r); err != nil {
			return "", fmt.Errorf("archive %s: %w", r, err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	return f.Name(), nil
}

func (cf *contextFiles) addEntry(tw *tar.Writer, rel string) error {
	p := filepath.Join(cf.dir, filepath.FromSlash(rel))
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = rel, 0, 0, "", ""
	if fi.IsDir() {
		hdr.Name += "/"
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	in, err := os.Open(p)
	if err != nil {
		return err
	}
	defer in.Close()
	_, err = io.CopyN(tw, in, hdr.Size)
	return err
}
