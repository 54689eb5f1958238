package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
		if err != nil || v != 5 {
			t.Fatalf("schema version = %d, %v", v, err)
		}
		d.Close()
	}
}

func TestTemplates(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	if _, err := d.GetTemplate(ctx, "base"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing template: %v", err)
	}
	if err := d.UpsertTemplate(ctx, Template{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("empty name: %v", err)
	}
	if err := d.UpsertTemplate(ctx, Template{ID: "tpl1", Name: "base", RootfsDir: "/a", CPUCount: 2}); err != nil {
		t.Fatal(err)
	}
	// Upsert by name keeps the ID, updates the rest.
	if err := d.UpsertTemplate(ctx, Template{ID: "other", Name: "base", RootfsDir: "/b", BuildID: "b2"}); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertTemplate(ctx, Template{Name: "code-interpreter-v1"}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"tpl1", "base"} {
		tp, err := d.GetTemplate(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if tp.ID != "tpl1" || tp.RootfsDir != "/b" || tp.BuildID != "b2" || tp.CreatedAt.IsZero() {
			t.Fatalf("GetTemplate(%s) = %+v", key, tp)
		}
	}
	now := time.Now()
	if err := d.MarkTemplateSpawned(ctx, "tpl1", now); err != nil {
		t.Fatal(err)
	}
	list, err := d.ListTemplates(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("list = %v, %v", list, err)
	}
	if list[0].Name != "base" || list[0].SpawnCount != 1 || list[0].LastSpawnedAt == nil {
		t.Fatalf("spawn stats: %+v", list[0])
	}
	if !regexp.MustCompile(`^[a-z0-9]{20}$`).MatchString(list[1].ID) {
		t.Fatalf("generated id %q", list[1].ID)
	}
}

func TestAPIKeys(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	if n, err := d.CountAPIKeys(ctx); err != nil || n != 0 {
		t.Fatalf("count = %d, %v", n, err)
	}
	key, err := d.CreateAPIKey(ctx, DefaultTeam)
	if err != nil {
		t.Fatal(err)
	}
	keyA, err := d.CreateAPIKey(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) {
		t.Fatalf("key %q", key)
	}
	tests := []struct {
		key  string
		want bool
		team string
	}{
		{key, true, DefaultTeam}, {keyA, true, "team-a"}, {"", false, ""}, {"e2b_" + "00", false, ""}, {key + "x", false, ""},
	}
	for _, tt := range tests {
		if team, ok, err := d.CheckAPIKey(ctx, tt.key); err != nil || ok != tt.want || team != tt.team {
			t.Errorf("CheckAPIKey(%q) = %q, %v, %v", tt.key, team, ok, err)
		}
	}
	var plain int
	if err := d.r.QueryRow(`SELECT COUNT(*) FROM api_keys WHERE hash = ? OR prefix = ?`, key, key).Scan(&plain); err != nil || plain != 0 {
		t.Fatalf("plaintext stored: %d %v", plain, err)
	}
}

func TestSandboxCRUD(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	start := time.Now().UTC().Truncate(time.Millisecond)
	s := Sandbox{ID: "iabc", Team: "t1", TemplateID: "t", Alias: "base", State: StateRunning, StartedAt: start,
		EndAt: start.Add(time.Minute), Metadata: map[string]string{"a": "b"}, Secure: true,
		AllowInternet: true, CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, EnvdAccessToken: "tok"}
	if err := d.InsertSandbox(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := d.InsertSandbox(ctx, s); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate: %v", err)
	}
	got, err := d.GetSandbox(ctx, "iabc")
	if err != nil {
		t.Fatal(err)
	}
	if !got.StartedAt.Equal(start) || got.Team != "t1" || got.Metadata["a"] != "b" || got.EnvVars == nil || !got.Secure || got.AutoPause {
		t.Fatalf("got %+v", got)
	}
	got.State = StatePaused
	if err := d.UpdateSandbox(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := d.UpdateSandbox(ctx, Sandbox{ID: "nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	if err := d.InsertSandbox(ctx, Sandbox{ID: "noteam", TemplateID: "t", State: StateRunning}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("insert without team: %v", err)
	}
	if g, _ := d.GetSandbox(ctx, "iabc"); g.State != StatePaused || g.Team != "t1" {
		t.Fatalf("state %q", g.State)
	}
	if err := d.DeleteSandbox(ctx, "iabc"); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteSandbox(ctx, "iabc"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.GetSandbox(ctx, "iabc"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}

func TestListSandboxes(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := []Sandbox{
		{ID: "a1", Team: "x", TemplateID: "t1", Alias: "base", State: StateRunning, StartedAt: base, Metadata: map[string]string{"env": "x"}},
		{ID: "a2", Team: "y", TemplateID: "t1", Alias: "base", State: StatePaused, StartedAt: base.Add(time.Second)},
		{ID: "a3", Team: "x", TemplateID: "t2", Alias: "ci", State: StateRunning, StartedAt: base.Add(time.Second), Metadata: map[string]string{"env": "x", "k": "v"}},
		{ID: "a4", Team: "y", TemplateID: "t2", Alias: "ci", State: StateRunning, StartedAt: base.Add(2 * time.Second)},
	}
	for _, r := range rows {
		if err := d.InsertSandbox(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(ss []Sandbox) (out []string) {
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}
	tests := []struct {
		name string
		f    SandboxFilter
		want []string
	}{
		{"all desc", SandboxFilter{}, []string{"a4", "a2", "a3", "a1"}},
		{"all asc", SandboxFilter{Order: "asc"}, []string{"a1", "a3", "a2", "a4"}},
		{"team x", SandboxFilter{Team: "x"}, []string{"a3", "a1"}},
		{"team y running", SandboxFilter{Team: "y", States: []string{StateRunning}}, []string{"a4"}},
		{"team x metadata", SandboxFilter{Team: "x", Metadata: map[string]string{"k": "v"}}, []string{"a3"}},
		{"team z", SandboxFilter{Team: "z"}, nil},
		{"running", SandboxFilter{States: []string{StateRunning}}, []string{"a4", "a3", "a1"}},
		{"metadata", SandboxFilter{Metadata: map[string]string{"env": "x"}}, []string{"a3", "a1"}},
		{"metadata 2 keys", SandboxFilter{Metadata: map[string]string{"env": "x", "k": "v"}}, []string{"a3"}},
		{"template alias", SandboxFilter{Template: "ci"}, []string{"a4", "a3"}},
		{"template id", SandboxFilter{Template: "t1"}, []string{"a2", "a1"}},
		{"started after inclusive", SandboxFilter{StartedAfter: base.Add(time.Second)}, []string{"a4", "a2", "a3"}},
		{"limit", SandboxFilter{Limit: 2}, []string{"a4", "a2"}},
		{"cursor desc", SandboxFilter{Cursor: &Cursor{StartedAt: base.Add(time.Second), ID: "a2"}}, []string{"a3", "a1"}},
		{"cursor asc", SandboxFilter{Order: "asc", Cursor: &Cursor{StartedAt: base.Add(time.Second), ID: "a3"}}, []string{"a2", "a4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := d.ListSandboxes(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if g := ids(got); len(g) != len(tt.want) || (len(g) > 0 && !equal(g, tt.want)) {
				t.Fatalf("got %v, want %v", g, tt.want)
			}
		})
	}
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
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
