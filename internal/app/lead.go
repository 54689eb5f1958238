package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/moatsh/moat/internal/store"
)

// leadEvery is how often a server that does not lead a job tries to, and
// how often the leader checks that it still does.
const leadEvery = 3 * time.Second

// runLed runs job while this server leads key among the servers sharing
// db (store.Lead): at most one at a time does it, and another takes over
// within leadEvery once the leader stops or loses its connection. job
// must return when its context ends. runLed returns when ctx ends.
func runLed(ctx context.Context, db *store.DB, key int64, name string, log *slog.Logger, job func(context.Context)) {
	for ctx.Err() == nil {
		release, held, ok, err := db.Lead(ctx, key)
		if err != nil {
			log.DebugContext(ctx, "cannot tell who leads; trying again", "job", name, "err", err)
		}
		if !ok {
			select {
			case <-ctx.Done():
			case <-time.After(leadEvery):
			}
			continue
		}
		log.InfoContext(ctx, "this server does the cluster's "+name, "job", name)
		jctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); job(jctx) }()
		watch(jctx, held, cancel)
		cancel()
		<-done
		release()
	}
}

// watch returns when ctx ends or held reports false, checking every
// leadEvery (then it cancels: the job stops).
func watch(ctx context.Context, held func(context.Context) bool, cancel func()) {
	t := time.NewTicker(leadEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			hctx, hcancel := context.WithTimeout(ctx, leadEvery)
			ok := held(hctx)
			hcancel()
			if !ok && ctx.Err() == nil {
				cancel()
				return
			}
		}
	}
}

// webhookPoll is how often the webhook deliverer looks at the outbox
// without being woken: in a cluster, other servers' events do not wake it.
func webhookPoll(cfg Config) time.Duration {
	if cfg.clustered() {
		return 2 * time.Second
	}
	return 0 // the webhook package's default
}
