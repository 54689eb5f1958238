package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
)

// Garbage collection of template files, run at start and then every
// gcInterval: the runtime's images of deleted or rebuilt templates that
// no sandbox or snapshot uses, the directories of deleted templates, and
// COPY uploads unused for server.UploadMaxAge.
const (
	gcInterval = 10 * time.Minute
	// orphanMinAge spares a template directory whose build just installed
	// it and has yet to register it (a CLI build in another process).
	orphanMinAge = time.Hour
)

// templateLister is what the collector needs of the store.
type templateLister interface {
	ListTemplates(ctx context.Context) ([]store.Template, error)
}

type collector struct {
	log     *slog.Logger
	dataDir string
	db      templateLister
	orch    *orchestrator.Orchestrator
	builds  *server.BuildConfig
}

// startGC runs collect now (sparing images touched in the last minute)
// and then every interval (sparing those touched within it), in a
// goroutine owned by the caller's run loop: it stops when ctx ends, and
// wait returns once it has, so that shutdown can wait for it before the
// store and the build manager close.
func startGC(ctx context.Context, interval time.Duration, collect func(context.Context, time.Duration)) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		collect(ctx, time.Minute)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ctx.Err() == nil { // a tick pending at the end: no more
					collect(ctx, interval)
				}
			}
		}
	}()
	return func() { <-done }
}

// collect runs one collection; imageMinAge spares runtime images touched
// more recently (creates keep them busy anyway; this is a second guard).
func (c *collector) collect(ctx context.Context, imageMinAge time.Duration) {
	var total int64
	if n, err := c.orch.PruneTemplateFiles(ctx, imageMinAge); err != nil {
		c.log.Warn("gc: template images", "err", err)
	} else {
		total += n
	}
	if n, err := c.orphans(ctx); err != nil {
		c.log.Warn("gc: deleted templates' files", "err", err)
	} else {
		total += n
	}
	if c.builds != nil {
		if n, bytes, err := c.builds.RemoveStaleUploads(server.UploadMaxAge); err != nil {
			c.log.Warn("gc: uploads", "err", err)
		} else if n > 0 {
			c.log.Info("gc: stale uploads removed", "files", n, "freed_mib", bytes>>20)
			total += bytes
		}
	}
	if total > 0 {
		c.log.Info("gc: template files freed", "freed_mib", total>>20)
	}
}

// orphans removes template directories of templates that no longer
// exist. A sandbox of a deleted template being created or running (whose
// name the store no longer knows) postpones it.
func (c *collector) orphans(ctx context.Context) (int64, error) {
	ts, err := c.db.ListTemplates(ctx)
	if err != nil {
		return 0, err
	}
	keep := map[string]bool{}
	ids := map[string]bool{}
	for _, t := range ts {
		keep[t.Name], ids[t.ID] = true, true
	}
	for id := range c.orch.TemplatesInUse() {
		if !ids[id] {
			return 0, nil
		}
	}
	_, freed, err := template.RemoveOrphans(c.dataDir, keep, orphanMinAge, c.log)
	return freed, err
}
