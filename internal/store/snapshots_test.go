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
		{ID: "snapa", SandboxID: "sb1", TemplateID: "t1", Runtime: "vm", MemoryMB: 512, EnvVars: map[string]string{"A": "1"}},
		{ID: "snapb", Name: "mine", SandboxID: "sb1", TemplateID: "t1", Runtime: "vm"},
		{ID: "snapc", SandboxID: "sb2", TemplateID: "t1", Runtime: "vm"},
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
		{"same id", Snapshot{ID: "snapa", SandboxID: "x", TemplateID: "t", Runtime: "vm"}},
		{"same name", Snapshot{ID: "snapd", Name: "mine", SandboxID: "x", TemplateID: "t", Runtime: "vm"}},
	} {
		if err := d.InsertSnapshot(ctx, tc.s); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("%s: err = %v, want already exists", tc.name, err)
		}
	}
	got, err := d.GetSnapshot(ctx, "mine")
	if err != nil || got.ID != "snapb" {
		t.Fatalf("get by name: %+v, %v", got, err)
	}
	got, err = d.GetSnapshot(ctx, "snapa")
	if err != nil || got.EnvVars["A"] != "1" || got.MemoryMB != 512 || !got.CreatedAt.Equal(base) {
		t.Fatalf("get by id: %+v, %v", got, err)
	}
	if _, err := d.GetSnapshot(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Fatalf("get unknown: %v", err)
	}
	for _, tc := range []struct {
		f    SnapshotFilter
		want []string
	}{
		{SnapshotFilter{}, []string{"snapc", "snapb", "snapa"}},
		{SnapshotFilter{SandboxID: "sb1"}, []string{"snapb", "snapa"}},
		{SnapshotFilter{Name: "mine"}, []string{"snapb"}},
		{SnapshotFilter{Limit: 2}, []string{"snapc", "snapb"}},
		{SnapshotFilter{After: "snapb"}, []string{"snapa"}},
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
	sb := Sandbox{ID: "ar1", TemplateID: "t", State: StateRunning, StartedAt: now, EndAt: now.Add(time.Minute),
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
