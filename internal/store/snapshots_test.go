package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

func TestSnapshotsCRUD(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	base := time.Now().UTC().Truncate(time.Millisecond)
	for i, s := range []Snapshot{
		{ID: "snapa", Team: "x", SandboxID: "sb1", TemplateID: "t1", Runtime: "vm", MemoryMB: 512, EnvVars: map[string]string{"A": "1"}},
		{ID: "snapb", Team: "x", Name: "mine", SandboxID: "sb1", TemplateID: "t1", Runtime: "vm"},
		{ID: "snapc", Team: "y", SandboxID: "sb2", TemplateID: "t1", Runtime: "vm"},
	} {
		s.CreatedAt = base.Add(time.Duration(i) * time.Second)
		if err := d.InsertSnapshot(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		s    Snapshot
	}{
		{"same id", Snapshot{ID: "snapa", Team: "y", SandboxID: "x", TemplateID: "t", Runtime: "vm"}},
		{"same name", Snapshot{ID: "snapd", Team: "x", Name: "mine", SandboxID: "x", TemplateID: "t", Runtime: "vm"}},
	} {
		if err := d.InsertSnapshot(ctx, tc.s); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("%s: err = %v, want already exists", tc.name, err)
		}
	}
	if err := d.InsertSnapshot(ctx, Snapshot{ID: "snapn", SandboxID: "x", TemplateID: "t", Runtime: "vm"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("no team: err = %v, want invalid argument", err)
	}
	got, err := d.GetSnapshot(ctx, "x", "mine")
	if err != nil || got.ID != "snapb" || got.Team != "x" {
		t.Fatalf("get by name: %+v, %v", got, err)
	}
	got, err = d.GetSnapshot(ctx, "x", "snapa")
	if err != nil || got.EnvVars["A"] != "1" || got.MemoryMB != 512 || !got.CreatedAt.Equal(base) {
		t.Fatalf("get by id: %+v, %v", got, err)
	}
	if _, err := d.GetSnapshot(ctx, "x", "nope"); !errdefs.IsNotFound(err) {
		t.Fatalf("get unknown: %v", err)
	}
	// Another team's snapshot is not found, by ID or by name.
	for _, ref := range []string{"snapa", "mine"} {
		if _, err := d.GetSnapshot(ctx, "y", ref); !errdefs.IsNotFound(err) {
			t.Fatalf("team y gets %s: %v", ref, err)
		}
	}
	if got, err := d.GetSnapshot(ctx, "", "snapc"); err != nil || got.Team != "y" {
		t.Fatalf("any team: %+v, %v", got, err)
	}
	// Names are unique per team: team y may use "mine" too.
	if err := d.InsertSnapshot(ctx, Snapshot{ID: "snapy", Team: "y", Name: "mine", SandboxID: "sb3", TemplateID: "t1",
		Runtime: "vm", CreatedAt: base.Add(-time.Hour)}); err != nil {
		t.Fatalf("same name in another team: %v", err)
	}
	if got, err := d.GetSnapshot(ctx, "y", "mine"); err != nil || got.ID != "snapy" {
		t.Fatalf("team y by name: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		f    SnapshotFilter
		want []string
	}{
		{SnapshotFilter{}, []string{"snapc", "snapb", "snapa", "snapy"}},
		{SnapshotFilter{Team: "x"}, []string{"snapb", "snapa"}},
		{SnapshotFilter{Team: "y"}, []string{"snapc", "snapy"}},
		{SnapshotFilter{Team: "y", SandboxID: "sb1"}, nil},
		{SnapshotFilter{SandboxID: "sb1"}, []string{"snapb", "snapa"}},
		{SnapshotFilter{Team: "x", Name: "mine"}, []string{"snapb"}},
		{SnapshotFilter{Limit: 2}, []string{"snapc", "snapb"}},
		{SnapshotFilter{After: "snapb"}, []string{"snapa", "snapy"}},
	} {
		ss, err := d.ListSnapshots(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range ss {
			ids = append(ids, s.ID)
		}
		if len(ids) != len(tc.want) || (len(ids) > 0 && ids[0] != tc.want[0]) || (len(ids) > 1 && ids[len(ids)-1] != tc.want[len(tc.want)-1]) {
			t.Errorf("list %+v = %v, want %v", tc.f, ids, tc.want)
		}
	}
	if err := d.DeleteSnapshot(ctx, "snapa"); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteSnapshot(ctx, "snapa"); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestSandboxAutoResumeAndTimeoutPersist(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	now := time.Now().UTC()
	sb := Sandbox{ID: "ar1", Team: DefaultTeam, TemplateID: "t", State: StateRunning, StartedAt: now, EndAt: now.Add(time.Minute),
		AutoPause: true, AutoResume: true, Timeout: 90 * time.Second}
	if err := d.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, err := d.GetSandbox(ctx, "ar1")
	if err != nil || !got.AutoResume || got.Timeout != 90*time.Second {
		t.Fatalf("got %+v, %v", got, err)
	}
	got.AutoResume, got.Timeout = false, 5*time.Second
	if err := d.UpdateSandbox(ctx, got); err != nil {
		t.Fatal(err)
	}
	if got, _ = d.GetSandbox(ctx, "ar1"); got.AutoResume || got.Timeout != 5*time.Second {
		t.Fatalf("after update %+v", got)
	}
}
