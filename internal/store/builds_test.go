package store

import (
	"context"
	"errors"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
)

// TestBuildsBelongToTheirTeam: a team's template ID is stable across its
// builds, its name is refused to other teams and over shared templates,
// builds and built templates are invisible to other teams, and only a
// finished build registers a template.
func TestBuildsBelongToTheirTeam(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	if err := d.UpsertTemplate(ctx, Template{ID: "base", Name: "base", RootfsDir: "/x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.RequestBuild(ctx, "a", "base", 0, 0); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("shared name: %v", err)
	}
	b1, err := d.RequestBuild(ctx, "a", "mine", 2, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if b1.Status != BuildWaiting || b1.TemplateID == "" || len(b1.ID) != 36 {
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
	if _, err := d.DeleteTeamTemplate(ctx, "a", "mine"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("delete while building: %v", err)
	}
	cfg := TemplateConfig{Env: map[string]string{"A": "1"}, Workdir: "/tmp", User: "root", StartCmd: "srv", ReadyCmd: "true"}
	if err := d.FinishBuild(ctx, b1, Template{RootfsDir: "/r", CPUCount: 2, MemoryMB: 1024}, cfg); err != nil {
		t.Fatal(err)
	}
	got, err := d.GetBuild(ctx, "a", b1.TemplateID, b1.ID)
	if err != nil || got.Status != BuildReady {
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
	if err := d.FinishBuild(ctx, b2, Template{RootfsDir: "/r"}, TemplateConfig{}); err != nil {
		t.Fatal(err)
	}
	if tpl2, _ := d.GetTeamTemplate(ctx, "a", "mine"); tpl2.ID != tpl.ID || tpl2.BuildID != b2.ID {
		t.Fatalf("rebuilt template = %+v", tpl2)
	}

	if _, err := d.DeleteTeamTemplate(ctx, "b", "mine"); !errdefs.IsNotFound(err) {
		t.Fatalf("b deletes a's template: %v", err)
	}
	if _, err := d.DeleteTeamTemplate(ctx, "a", "base"); !errors.Is(err, ErrSharedTemplate) {
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

func TestFailedBuildsRegisterNothing(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
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
	if got.Status != BuildError || got.Reason == "" || got.ReasonStep != "1" {
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
	if got, _ := d.GetBuild(ctx, "a", b2.TemplateID, b2.ID); got.Status != BuildError || got.Reason != "restart" {
		t.Fatalf("interrupted build = %+v", got)
	}
	// A pending template can be deleted by its team.
	if _, err := d.DeleteTeamTemplate(ctx, "a", "broken"); err != nil {
		t.Fatal(err)
	}
}
