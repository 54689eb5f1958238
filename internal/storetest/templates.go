package storetest

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

func templates(t *testing.T, d Store) {
	ctx := context.Background()
	if _, err := d.GetTemplate(ctx, "base"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing template: %v", err)
	}
	if err := d.UpsertTemplate(ctx, store.Template{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("empty name: %v", err)
	}
	if err := d.UpsertTemplate(ctx, store.Template{ID: "tpl1", Name: "base", RootfsDir: "/a", CPUCount: 2}); err != nil {
		t.Fatal(err)
	}
	// Upsert by name keeps the ID, updates the rest.
	if err := d.UpsertTemplate(ctx, store.Template{ID: "other", Name: "base", RootfsDir: "/b", BuildID: "b2"}); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertTemplate(ctx, store.Template{Name: "code-interpreter-v1"}); err != nil {
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
	// InsertSpawnedSandbox records the sandbox and counts the spawn at once.
	sb := store.Sandbox{ID: "spawned", Team: store.DefaultTeam, TemplateID: "tpl1", State: store.StateRunning, StartedAt: now, EndAt: now.Add(time.Minute)}
	if err := d.InsertSpawnedSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got, err := d.GetSandbox(ctx, "spawned"); err != nil || got.TemplateID != "tpl1" {
		t.Fatalf("spawned sandbox = %+v, %v", got, err)
	}
	if tp, err := d.GetTemplate(ctx, "tpl1"); err != nil || tp.SpawnCount != 2 {
		t.Fatalf("spawn count after InsertSpawnedSandbox = %+v, %v", tp, err)
	}
}

func apiKeys(t *testing.T, d Store) {
	ctx := context.Background()
	if n, err := d.CountAPIKeys(ctx); err != nil || n != 0 {
		t.Fatalf("count = %d, %v", n, err)
	}
	key, err := d.CreateAPIKey(ctx, store.DefaultTeam)
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
		{key, true, store.DefaultTeam}, {keyA, true, "team-a"}, {"", false, ""}, {"e2b_" + "00", false, ""}, {key + "x", false, ""},
	}
	for _, tt := range tests {
		if team, ok, err := d.CheckAPIKey(ctx, tt.key); err != nil || ok != tt.want || team != tt.team {
			t.Errorf("CheckAPIKey(%q) = %q, %v, %v", tt.key, team, ok, err)
		}
	}
	namedKeys(t, d, key)
}

// namedKeys: named keys list per team without their values, rename and
// delete only within their team, and a deleted key stops working.
func namedKeys(t *testing.T, d Store, first string) {
	ctx := context.Background()
	k, val, err := d.CreateNamedAPIKey(ctx, store.DefaultTeam, "ci")
	if err != nil || k.Name != "ci" || k.ID == "" || !strings.HasPrefix(val, k.Prefix) || !strings.HasSuffix(val, k.Suffix) {
		t.Fatalf("CreateNamedAPIKey = %+v, %q, %v", k, val, err)
	}
	if _, _, err := d.CreateNamedAPIKey(ctx, store.DefaultTeam, strings.Repeat("n", store.MaxAPIKeyName+1)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a long name: %v", err)
	}
	list, err := d.ListAPIKeys(ctx, store.DefaultTeam)
	if err != nil || len(list) != 2 || list[1].ID != k.ID || list[1].Name != "ci" || list[0].Suffix != "" && !strings.HasSuffix(first, list[0].Suffix) {
		t.Fatalf("ListAPIKeys = %+v, %v", list, err)
	}
	if id, err := d.APIKeyID(ctx, val); err != nil || id != k.ID {
		t.Errorf("APIKeyID = %q, %v; want %s", id, err, k.ID)
	}
	for _, tc := range []struct {
		team, id string
		want     error
	}{
		{"team-a", k.ID, errdefs.ErrNotFound}, {store.DefaultTeam, "x", errdefs.ErrNotFound}, {store.DefaultTeam, "99999", errdefs.ErrNotFound},
		{store.DefaultTeam, k.ID, nil},
	} {
		if err := d.RenameAPIKey(ctx, tc.team, tc.id, "deploy"); !errors.Is(err, tc.want) {
			t.Errorf("RenameAPIKey(%s, %s) = %v, want %v", tc.team, tc.id, err, tc.want)
		}
	}
	if err := d.DeleteAPIKey(ctx, "team-a", k.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another team's delete: %v", err)
	}
	if err := d.DeleteAPIKey(ctx, store.DefaultTeam, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := d.CheckAPIKey(ctx, val); ok {
		t.Error("a deleted key still works")
	}
	if list, _ := d.ListAPIKeys(ctx, "team-a"); len(list) != 1 {
		t.Errorf("team-a lists %+v", list)
	}
}

// teamBuilds: a team's template ID is stable across its builds, its name
// is refused to other teams and over shared templates, builds and built
// templates are invisible to other teams, and only a finished build
// registers a template.
func teamBuilds(t *testing.T, d Store) {
	ctx := context.Background()
	if err := d.UpsertTemplate(ctx, store.Template{ID: "base", Name: "base", RootfsDir: "/x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.RequestBuild(ctx, "a", "base", 0, 0); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("shared name: %v", err)
	}
	b1, err := d.RequestBuild(ctx, "a", "mine", 2, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if b1.Status != store.BuildWaiting || b1.TemplateID == "" || len(b1.ID) != 36 {
		t.Fatalf("build = %+v", b1)
	}
	// Requested, not built: not a template anyone can start.
	if _, err := d.GetTeamTemplate(ctx, "a", "mine"); !errdefs.IsNotFound(err) {
		t.Fatalf("unbuilt template: %v", err)
	}
	if _, err := d.RequestBuild(ctx, "b", "mine", 0, 0); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("other team, pending name: %v", err)
	}
	b2, err := d.RequestBuild(ctx, "a", "mine", 0, 0)
	if err != nil || b2.TemplateID != b1.TemplateID || b2.ID == b1.ID {
		t.Fatalf("second build = %+v, %v (first %+v)", b2, err, b1)
	}
	if _, err := d.GetBuild(ctx, "b", b1.TemplateID, b1.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("other team's build: %v", err)
	}
	if ok, _ := d.TeamOwnsTemplateID(ctx, "a", b1.TemplateID); !ok {
		t.Fatal("a does not own its pending template")
	}
	if ok, _ := d.TeamOwnsTemplateID(ctx, "b", b1.TemplateID); ok {
		t.Fatal("b owns a's template")
	}
	if err := d.StartBuild(ctx, b1.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.StartBuild(ctx, b1.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("second start: %v", err)
	}

	cfg := store.TemplateConfig{Env: map[string]string{"A": "1"}, Workdir: "/tmp", User: "root", StartCmd: "srv", ReadyCmd: "true"}
	if err := d.FinishBuild(ctx, b1, store.Template{RootfsDir: "/r", CPUCount: 2, MemoryMB: 1024}, cfg); err != nil {
		t.Fatal(err)
	}
	got, err := d.GetBuild(ctx, "a", b1.TemplateID, b1.ID)
	if err != nil || got.Status != store.BuildReady {
		t.Fatalf("finished build = %+v, %v", got, err)
	}
	tpl, err := d.GetTeamTemplate(ctx, "a", "mine")
	if err != nil || tpl.ID != b1.TemplateID || tpl.BuildID != b1.ID || tpl.RootfsDir != "/r" || tpl.CPUCount != 2 {
		t.Fatalf("template = %+v, %v", tpl, err)
	}
	if c, err := d.TemplateConfigOf(ctx, tpl.ID); err != nil || c.Workdir != "/tmp" || c.User != "root" || c.Env["A"] != "1" ||
		c.StartCmd != "srv" || c.ReadyCmd != "true" {
		t.Fatalf("config = %+v, %v", c, err)
	}
	if c, err := d.TemplateConfigOf(ctx, "base"); err != nil || !c.IsZero() {
		t.Fatalf("shared template config = %+v, %v", c, err)
	}
	builtTemplate(t, d, tpl, b2)
}

func failedBuilds(t *testing.T, d Store) {
	ctx := context.Background()
	b, err := d.RequestBuild(ctx, "a", "broken", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartBuild(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.FailBuild(ctx, b.ID, "step 1 (RUN) exited with 1", "1"); err != nil {
		t.Fatal(err)
	}
	got, _ := d.GetBuild(ctx, "a", b.TemplateID, b.ID)
	if got.Status != store.BuildError || got.Reason == "" || got.ReasonStep != "1" {
		t.Fatalf("build = %+v", got)
	}
	if _, err := d.GetTeamTemplate(ctx, "a", "broken"); !errdefs.IsNotFound(err) {
		t.Fatalf("failed build registered: %v", err)
	}
	// A restart fails what was running.
	b2, _ := d.RequestBuild(ctx, "a", "broken", 0, 0)
	if n, err := d.FailUnfinishedBuilds(ctx, "restart"); err != nil || n != 1 {
		t.Fatalf("fail unfinished = %d, %v", n, err)
	}
	if got, _ := d.GetBuild(ctx, "a", b2.TemplateID, b2.ID); got.Status != store.BuildError || got.Reason != "restart" {
		t.Fatalf("interrupted build = %+v", got)
	}
	// A pending template can be deleted by its team.
	if _, err := d.DeleteTeamTemplate(ctx, "a", "broken"); err != nil {
		t.Fatal(err)
	}
}

// builtTemplate: team a's template tpl, built once, is invisible to team
// b, listed with the shared one, owned by a; b2, a second build of it,
// updates the same template.
func builtTemplate(t *testing.T, d Store, tpl store.Template, b2 store.Build) {
	t.Helper()
	ctx := context.Background()
	for _, ref := range []string{"mine", tpl.ID} {
		if _, err := d.GetTeamTemplate(ctx, "b", ref); !errdefs.IsNotFound(err) {
			t.Fatalf("b sees a's template by %s: %v", ref, err)
		}
	}
	if _, err := d.GetTeamTemplate(ctx, "b", "base"); err != nil {
		t.Fatalf("shared template for b: %v", err)
	}
	names := func(team string) []string {
		ts, err := d.ListTeamTemplates(ctx, team)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, t := range ts {
			out = append(out, t.Name)
		}
		return out
	}
	if a, b := names("a"), names("b"); len(a) != 2 || len(b) != 1 || b[0] != "base" {
		t.Fatalf("lists: a %v, b %v", a, b)
	}
	if owner, err := d.TemplateOwner(ctx, tpl.ID); err != nil || owner != "a" {
		t.Fatalf("owner = %q, %v", owner, err)
	}
	// The second build of the same team updates the same template.
	if err := d.StartBuild(ctx, b2.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.FinishBuild(ctx, b2, store.Template{RootfsDir: "/r"}, store.TemplateConfig{}); err != nil {
		t.Fatal(err)
	}
	if tpl2, _ := d.GetTeamTemplate(ctx, "a", "mine"); tpl2.ID != tpl.ID || tpl2.BuildID != b2.ID {
		t.Fatalf("rebuilt template = %+v", tpl2)
	}
	for team, want := range map[string]int{"a": 2, "b": 0} {
		if bs, err := d.ListBuilds(ctx, team, tpl.ID); err != nil || len(bs) != want {
			t.Fatalf("%s lists builds %+v, %v; want %d", team, bs, err, want)
		}
	}
}

// teamBuildsDelete: a team deletes its own template and its builds, but
// not while it is being built, nor a shared or another team's template;
// the name is then free for anyone.
func teamBuildsDelete(t *testing.T, d Store) {
	ctx := context.Background()
	if err := d.UpsertTemplate(ctx, store.Template{ID: "base", Name: "base", RootfsDir: "/x"}); err != nil {
		t.Fatal(err)
	}
	b1, err := d.RequestBuild(ctx, "a", "mine", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartBuild(ctx, b1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteTeamTemplate(ctx, "a", "mine"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("delete while building: %v", err)
	}
	if err := d.FinishBuild(ctx, b1, store.Template{RootfsDir: "/r"}, store.TemplateConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteTeamTemplate(ctx, "b", "mine"); !errdefs.IsNotFound(err) {
		t.Fatalf("b deletes a's template: %v", err)
	}
	if _, err := d.DeleteTeamTemplate(ctx, "a", "base"); !errors.Is(err, store.ErrSharedTemplate) {
		t.Fatalf("delete shared: %v", err)
	}
	if del, err := d.DeleteTeamTemplate(ctx, "a", "mine"); err != nil || del.Name != "mine" {
		t.Fatalf("delete = %+v, %v", del, err)
	}
	if _, err := d.GetBuild(ctx, "a", b1.TemplateID, b1.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("builds outlive their template: %v", err)
	}
	// The name is free again, for anyone.
	if _, err := d.RequestBuild(ctx, "b", "mine", 0, 0); err != nil {
		t.Fatalf("freed name: %v", err)
	}
}
