package app

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit/pgtest"
)

// TestRunLed: of two servers on one PostgreSQL store, one runs the job;
// when it stops, the other takes over; never both at once.
func TestRunLed(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDB(t)
	ctx := context.Background()
	var running, most, runs atomic.Int32
	job := func(ctx context.Context) {
		runs.Add(1)
		if n := running.Add(1); n > most.Load() {
			most.Store(n)
		}
		<-ctx.Done()
		running.Add(-1)
	}
	var stops []func()
	for range 2 {
		db, err := store.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		jctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			runLed(jctx, db, store.WebhookLeadKey, "test", slog.New(slog.DiscardHandler), job)
		}()
		stops = append(stops, func() { cancel(); <-done })
	}
	waitFor(t, func() bool { return running.Load() == 1 })
	time.Sleep(leadEvery + time.Second) // the other keeps trying meanwhile
	if running.Load() != 1 || runs.Load() != 1 {
		t.Fatalf("running %d, started %d times: want one leader", running.Load(), runs.Load())
	}
	// Stop both in turn: whichever led, the other takes over, then none.
	stops[0]()
	waitFor(t, func() bool { return running.Load() == 1 })
	stops[1]()
	if most.Load() != 1 {
		t.Errorf("%d jobs ran at once", most.Load())
	}
	if runs.Load() < 1 || runs.Load() > 2 {
		t.Errorf("started %d times", runs.Load())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * leadEvery); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}
