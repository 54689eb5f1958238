package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

func openTest(t *testing.T) *DB {
	t.Helper()
	d, err := Open(context.Background(), filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestOpenMigratesOnceAndReopens(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	for i := range 2 {
		d, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		v, err := d.SchemaVersion(ctx)
		if err != nil || v != latestMigration(t) {
			t.Fatalf("schema version = %d, %v", v, err)
		}
		d.Close()
	}
}

// TestAPIKeysStoreNoPlaintext: only a key's hash and prefix are stored
// (the suite in storetest checks the keys themselves).
func TestAPIKeysStoreNoPlaintext(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	key, err := d.CreateAPIKey(ctx, DefaultTeam)
	if err != nil {
		t.Fatal(err)
	}
	var plain int
	if err := d.r.QueryRow(`SELECT COUNT(*) FROM api_keys WHERE hash = ? OR prefix = ?`, key, key).Scan(&plain); err != nil || plain != 0 {
		t.Fatalf("plaintext stored: %d %v", plain, err)
	}
}

func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	d1, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := d1
			if i%2 == 1 {
				db = d2
			}
			_, err := db.CreateAPIKey(ctx, DefaultTeam)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := d1.CountAPIKeys(ctx); n != 40 {
		t.Fatalf("count %d", n)
	}
}

// TestOpenRestrictsFiles: moat.db and its -wal/-shm are owner-only, for a
// new store and for one an older version left world-readable.
func TestOpenRestrictsFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep func(path string)
	}{
		{"new", func(string) {}},
		{"left 0644", func(path string) {
			db, err := Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				_ = os.Chmod(p, 0o644)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "moat.db")
			tc.prep(path)
			db, err := Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.CreateAPIKey(context.Background(), DefaultTeam); err != nil { // writes the WAL
				t.Fatal(err)
			}
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: mode %v, want 0600", filepath.Base(p), fi.Mode().Perm())
				}
			}
		})
	}
}

// TestContention: many goroutines writing at once never see SQLITE_BUSY
// (they queue for the one writer), a read-only connection refuses writes,
// and lists keep answering while writers are busy.
func TestContention(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	const writers, each = 64, 20
	var wg sync.WaitGroup
	errc := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("iw%dn%d", w, i)
				sb := Sandbox{ID: id, Team: DefaultTeam, TemplateID: "t", State: StateRunning, StartedAt: time.Now(), EndAt: time.Now()}
				if err := d.InsertSandbox(ctx, sb); err != nil {
					errc <- err
					continue
				}
				sb.State = StatePaused
				if err := d.UpdateSandbox(ctx, sb); err != nil {
					errc <- err
				}
				if i%2 == 0 {
					if err := d.DeleteSandbox(ctx, id); err != nil {
						errc <- err
					}
				}
			}
		}()
	}
	stop := make(chan struct{})
	var slowest time.Duration
	var lists int
	listDone := make(chan struct{})
	go func() {
		defer close(listDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			if _, err := d.ListSandboxes(ctx, SandboxFilter{}); err != nil {
				errc <- err
				return
			}
			slowest = max(slowest, time.Since(start))
			lists++
		}
	}()
	wg.Wait()
	close(stop)
	<-listDone
	close(errc)
	for err := range errc {
		t.Errorf("under contention: %v", err)
	}
	got, err := d.ListSandboxes(ctx, SandboxFilter{})
	if err != nil || len(got) != writers*each/2 {
		t.Fatalf("after the writers: %d sandboxes, %v; want %d", len(got), err, writers*each/2)
	}
	if _, err := d.r.ExecContext(ctx, `DELETE FROM sandboxes`); err == nil {
		t.Fatal("a reader connection accepted a write")
	}
	t.Logf("%d lists during %d writes; slowest list %s", lists, writers*each*2, slowest)
	if lists == 0 {
		t.Fatal("no list completed while writers ran")
	}
}

// InsertSpawnedSandbox records the sandbox and counts the spawn together;
// a refused insert counts nothing.
func TestInsertSpawnedSandbox(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	if err := d.UpsertTemplate(ctx, Template{ID: "tpl1", Name: "base"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	sb := Sandbox{ID: "sb1", Team: DefaultTeam, TemplateID: "tpl1", Alias: "base", State: StateRunning,
		StartedAt: now, EndAt: now.Add(time.Minute)}
	tests := []struct {
		name    string
		sb      Sandbox
		wantErr error
		count   int
	}{
		{"new", sb, nil, 1},
		{"taken ID", sb, errdefs.ErrAlreadyExists, 1},
		{"no team", Sandbox{ID: "sb2", TemplateID: "tpl1"}, errdefs.ErrInvalidArgument, 1},
		{"template deleted meanwhile", Sandbox{ID: "sb3", Team: DefaultTeam, TemplateID: "gone", State: StateRunning}, nil, 1},
	}
	for _, tt := range tests {
		err := d.InsertSpawnedSandbox(ctx, tt.sb)
		if (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
			t.Fatalf("%s: err = %v, want %v", tt.name, err, tt.wantErr)
		}
		tp, err := d.GetTemplate(ctx, "tpl1")
		if err != nil || tp.SpawnCount != tt.count {
			t.Fatalf("%s: spawn count = %d (%v), want %d", tt.name, tp.SpawnCount, err, tt.count)
		}
	}
	got, err := d.GetSandbox(ctx, "sb1")
	if err != nil || got.TemplateID != "tpl1" || !got.StartedAt.Equal(now) {
		t.Fatalf("stored sandbox = %+v, %v", got, err)
	}
	tp, _ := d.GetTemplate(ctx, "tpl1")
	if tp.LastSpawnedAt == nil || !tp.LastSpawnedAt.Equal(now) {
		t.Fatalf("last spawned = %v, want %v", tp.LastSpawnedAt, now)
	}
}

// TestDeleteTemplate: DeleteTemplate takes the exact ID, not a name.
func TestDeleteTemplate(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	if err := d.UpsertTemplate(ctx, Template{ID: "tpl1", Name: "base", RootfsDir: "/a"}); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteTemplate(ctx, "base"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("delete by name: %v", err)
	}
	if err := d.DeleteTemplate(ctx, "tpl1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.GetTemplate(ctx, "base"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted template: %v", err)
	}
}
