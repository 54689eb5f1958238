package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit/pgtest"
)

// TestPostgresTwoServers opens one database from several stores at once,
// as API servers of a cluster do: their migrations do not collide, and a
// read-check-write transaction (a template alias claimed by a team) is
// not interleaved, so exactly one team ends up owning a contested name.
func TestPostgresTwoServers(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDB(t)
	ctx := context.Background()
	const servers = 4
	dbs := make([]*store.DB, servers)
	var wg sync.WaitGroup
	errs := make([]error, servers)
	for i := range dbs {
		wg.Go(func() { dbs[i], errs[i] = store.Open(ctx, dsn) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		t.Cleanup(func() { dbs[i].Close() })
	}
	lite, err := store.Open(ctx, filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := lite.SchemaVersion(ctx)
	lite.Close()
	if v, err := dbs[0].SchemaVersion(ctx); err != nil || v != want {
		t.Fatalf("schema version = %d, %v; want SQLite's %d", v, err, want)
	}

	for round := range 10 {
		name := fmt.Sprintf("contested-%d", round)
		owners := make([]string, servers)
		for i, d := range dbs {
			wg.Go(func() {
				team := fmt.Sprintf("team%d", i)
				_, err := d.RequestBuild(ctx, team, name, 1, 256)
				switch {
				case err == nil:
					owners[i] = team
				case !errors.Is(err, errdefs.ErrAlreadyExists):
					t.Errorf("request build %s by %s: %v", name, team, err)
				}
			})
		}
		wg.Wait()
		n := 0
		for _, o := range owners {
			if o != "" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("round %d: %d teams got %q (%v), want exactly 1", round, n, name, owners)
		}
	}
}

// TestPostgresBadDSN: an unreachable or malformed database is a clear
// error from Open, not a hang or a panic.
func TestPostgresBadDSN(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	for _, dsn := range []string{
		"postgres://moat@/nosuchdb?host=" + srv.Dir() + "&sslmode=disable",
		"postgres://moat@/x?host=/nonexistent-socket-dir&sslmode=disable&connect_timeout=2",
		"postgres://%zz",
	} {
		d, err := store.Open(ctx, dsn)
		if err == nil {
			d.Close()
			t.Errorf("Open(%q) succeeded", dsn)
			continue
		}
		t.Logf("Open(%q): %v", dsn, err)
	}
}

// twoStores are two stores on one new database of a private server, as
// two servers of a cluster have.
func twoStores(t *testing.T) (srv *pgtest.Server, a, b *store.DB) {
	t.Helper()
	srv = pgtest.Start(t)
	dsn := srv.NewDB(t)
	var dbs [2]*store.DB
	for i := range dbs {
		db, err := store.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs[i] = db
	}
	return srv, dbs[0], dbs[1]
}

// TestPostgresLockServer: a second server on the same database is refused
// while the first holds it, and may take it once the first lets go.
func TestPostgresLockServer(t *testing.T) {
	_, a, b := twoStores(t)
	ctx := context.Background()
	release, err := a.LockServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.LockServer(ctx); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second LockServer: %v, want ErrConflict", err)
	}
	release()
	release2, err := b.LockServer(ctx)
	if err != nil {
		t.Fatalf("LockServer after release: %v", err)
	}
	release2()
}

// TestPostgresLead: of two stores on one database one leads a job; the
// other does once the first lets go or its connection dies.
func TestPostgresLead(t *testing.T) {
	srv, a, b := twoStores(t)
	ctx := context.Background()
	release, held, ok, err := a.Lead(ctx, store.WebhookLeadKey)
	if err != nil || !ok || !held(ctx) {
		t.Fatalf("first Lead: ok %v, %v", ok, err)
	}
	if _, _, ok, err := b.Lead(ctx, store.WebhookLeadKey); ok || err != nil {
		t.Fatalf("second Lead while the first holds: ok %v, %v", ok, err)
	}
	release()
	release2, held2, ok, err := b.Lead(ctx, store.WebhookLeadKey)
	if err != nil || !ok {
		t.Fatalf("Lead after release: ok %v, %v", ok, err)
	}
	defer release2()
	if held(ctx) {
		t.Error("held reports true after release")
	}
	// A store whose server is gone no longer holds it.
	srv.Stop()
	if held2(ctx) {
		t.Error("held reports true with the server stopped")
	}
	srv.Restart(t)
}

// TestPostgresOutage: while PostgreSQL is down, reads and writes fail at
// once with errdefs.ErrUnavailable (not a hang, not an unclassified
// error); when it is back, the same store works again without reopening.
func TestPostgresOutage(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	d, err := store.Open(ctx, srv.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.CreateAPIKey(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for i := range 3 { // the pool's old connections first, then new ones
		start := time.Now()
		_, err := d.CreateAPIKey(ctx, "a")
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("write %d while down: %v, want ErrUnavailable", i, err)
		}
		if _, err := d.CountAPIKeys(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("read %d while down: %v, want ErrUnavailable", i, err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("attempt %d took %v while down", i, took)
		}
	}
	srv.Restart(t)
	if _, err := d.CreateAPIKey(ctx, "a"); err != nil {
		t.Fatalf("write after restart: %v", err)
	}
	if n, err := d.CountAPIKeys(ctx); err != nil || n != 2 {
		t.Fatalf("keys after restart = %d, %v; want 2", n, err)
	}
}
