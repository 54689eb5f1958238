package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
)

// UploadMaxAge is how long an uploaded COPY source stays after its last
// use (upload, files check that found it, build that copied it). It is
// far longer than a build may run, so a build never loses the files it
// is about to stage.
const UploadMaxAge = 24 * time.Hour

// deletePruneMinAge spares runtime images handed out this recently when a
// delete prunes: a create that the orchestrator does not track (a warm
// pool's, a benchmark's) may be about to layer an overlay over them.
const deletePruneMinAge = time.Minute

// freeTemplateFiles removes a deleted template's files: its directory
// (rootfs, stamp) unless sandboxes use it or a create from it is under
// way, and the runtime's images of it that no sandbox or snapshot needs.
// What stays is removed by a later collection (see GC); the deletion
// itself has succeeded either way.
func (s *Server) freeTemplateFiles(ctx context.Context, t store.Template) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if t.Name != "" && s.builds != nil && s.builds.DataDir != "" {
		if s.orch.TemplatesInUse()[t.ID] {
			s.log.Info("deleted template's files kept while sandboxes use it", "template", t.Name)
		} else if err := template.RemoveTemplateFiles(s.builds.DataDir, t.Name); err != nil {
			s.log.Info("deleted template's files kept", "template", t.Name, "why", err)
		}
	}
	if freed, err := s.orch.PruneTemplateFiles(ctx, deletePruneMinAge); err != nil {
		s.log.Warn("prune template images", "err", err)
	} else if freed > 0 {
		s.log.Info("template images freed", "template", t.Name, "freed_mib", freed>>20)
	}
}

// touchUploads marks the uploads a build's COPY steps use as used now.
func (b *BuildConfig) touchUploads(team string, spec build.Spec) {
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
func (b *BuildConfig) RemoveStaleUploads(maxAge time.Duration) (int, int64, error) {
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
