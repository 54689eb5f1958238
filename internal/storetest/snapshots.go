package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// seedSnapshots inserts snapshots snapa, snapb ("mine") and snapc of teams
// x, x and y, a second apart from base, and snapy (team y's "mine"), an
// hour older.
func seedSnapshots(t *testing.T, d Store, base time.Time) {
	t.Helper()
	ctx := context.Background()
	for i, s := range []store.Snapshot{
		{ID: "snapa", Team: "x", SandboxID: "sb1", TemplateID: "t1", Runtime: "vm", MemoryMB: 512, EnvVars: map[string]string{"A": "1"}},
		{ID: "snapb", Team: "x", Name: "mine", SandboxID: "sb1", TemplateID: "t1", Runtime: "vm"},
		{ID: "snapc", Team: "y", SandboxID: "sb2", TemplateID: "t1", Runtime: "vm"},
	} {
		s.CreatedAt = base.Add(time.Duration(i) * time.Second)
		if err := d.InsertSnapshot(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// Names are unique per team: team y may use "mine" too.
	if err := d.InsertSnapshot(ctx, store.Snapshot{ID: "snapy", Team: "y", Name: "mine", SandboxID: "sb3", TemplateID: "t1",
		Runtime: "vm", CreatedAt: base.Add(-time.Hour)}); err != nil {
		t.Fatalf("same name in another team: %v", err)
	}
}

// snapshotsCRUD: IDs are unique, names unique per team; a team finds only
// its own snapshots, by ID or name, and "" finds any team's.
func snapshotsCRUD(t *testing.T, d Store) {
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Millisecond)
	seedSnapshots(t, d, base)
	for _, tc := range []struct {
		name string
		s    store.Snapshot
	}{
		{"same id", store.Snapshot{ID: "snapa", Team: "y", SandboxID: "x", TemplateID: "t", Runtime: "vm"}},
		{"same name", store.Snapshot{ID: "snapd", Team: "x", Name: "mine", SandboxID: "x", TemplateID: "t", Runtime: "vm"}},
	} {
		if err := d.InsertSnapshot(ctx, tc.s); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("%s: err = %v, want already exists", tc.name, err)
		}
	}
	if err := d.InsertSnapshot(ctx, store.Snapshot{ID: "snapn", SandboxID: "x", TemplateID: "t", Runtime: "vm"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
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
	// Another team's snapshot is not found by ID; by name, the team gets
	// its own.
	for _, ref := range []string{"snapa", "snapb"} {
		if _, err := d.GetSnapshot(ctx, "y", ref); !errdefs.IsNotFound(err) {
			t.Fatalf("team y gets %s: %v", ref, err)
		}
	}
	if got, err := d.GetSnapshot(ctx, "", "snapc"); err != nil || got.Team != "y" {
		t.Fatalf("any team: %+v, %v", got, err)
	}
	if got, err := d.GetSnapshot(ctx, "y", "mine"); err != nil || got.ID != "snapy" {
		t.Fatalf("team y by name: %+v, %v", got, err)
	}
	if err := d.DeleteSnapshot(ctx, "snapa"); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteSnapshot(ctx, "snapa"); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
}

// listSnapshots: newest first, filtered by team, sandbox and name, paged
// by limit and after.
func listSnapshots(t *testing.T, d Store) {
	ctx := context.Background()
	seedSnapshots(t, d, time.Now().UTC().Truncate(time.Millisecond))
	for _, tc := range []struct {
		f    store.SnapshotFilter
		want []string
	}{
		{store.SnapshotFilter{}, []string{"snapc", "snapb", "snapa", "snapy"}},
		{store.SnapshotFilter{Team: "x"}, []string{"snapb", "snapa"}},
		{store.SnapshotFilter{Team: "y"}, []string{"snapc", "snapy"}},
		{store.SnapshotFilter{Team: "y", SandboxID: "sb1"}, nil},
		{store.SnapshotFilter{SandboxID: "sb1"}, []string{"snapb", "snapa"}},
		{store.SnapshotFilter{Team: "x", Name: "mine"}, []string{"snapb"}},
		{store.SnapshotFilter{Limit: 2}, []string{"snapc", "snapb"}},
		{store.SnapshotFilter{After: "snapb"}, []string{"snapa", "snapy"}},
	} {
		ss, err := d.ListSnapshots(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range ss {
			ids = append(ids, s.ID)
		}
		if !equal(ids, tc.want) {
			t.Errorf("list %+v = %v, want %v", tc.f, ids, tc.want)
		}
	}
}
