package templateapi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/build"
)

// UploadMaxAge is how long an uploaded COPY source stays after its last
// use (upload, files check that found it, build that copied it). It is
// far longer than a build may run, so a build never loses the files it
// is about to stage.
const UploadMaxAge = 24 * time.Hour

// touchUploads marks the uploads a build's COPY steps use as used now.
func (b *Config) touchUploads(team string, spec build.Spec) {
	now := b.now()
	for _, st := range spec.Steps {
		if st.Type == "COPY" && filesHashRE.MatchString(st.FilesHash) {
			_ = os.Chtimes(b.uploadPath(team, st.FilesHash), now, now)
		}
	}
}

// RemoveStaleUploads removes uploaded COPY sources (and partial uploads a
// crash left) unused for more than maxAge. Team directories stay (an
// upload may be creating its file in one). It returns how many files went and the bytes freed.
func (b *Config) RemoveStaleUploads(maxAge time.Duration) (int, int64, error) {
	root := filepath.Join(b.DataDir, "build-files")
	teams, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("upload gc: %w", err)
	}
	cutoff := b.now().Add(-maxAge)
	n, freed := 0, int64(0)
	var errs []error
	for _, t := range teams {
		dir := filepath.Join(root, t.Name())
		files, err := os.ReadDir(dir)
		if err != nil || !t.IsDir() {
			continue
		}
		for _, f := range files {
			fi, err := f.Info()
			if err != nil || !fi.Mode().IsRegular() || !isUploadName(f.Name()) || !fi.ModTime().Before(cutoff) {
				continue
			}
			if err := os.Remove(filepath.Join(dir, f.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("upload gc: %w", err))
				continue
			}
			n, freed = n+1, freed+fi.Size()
		}
	}
	return n, freed, errors.Join(errs...)
}

// isUploadName reports whether a file in a team's store is an upload
// (<hash>.tar) or a partial one (.upload-*).
func isUploadName(name string) bool {
	h, ok := strings.CutSuffix(name, ".tar")
	return (ok && filesHashRE.MatchString(h)) || strings.HasPrefix(name, ".upload-")
}
