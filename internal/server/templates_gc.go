package server

import (
	"context"
	"time"

	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
)

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
