package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// volumes: IDs are unique, names unique per team; a team sees, finds and
// deletes only its own volumes; "" finds any team's by ID.
func volumes(t *testing.T, d Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, v := range []store.Volume{
		{ID: "vola", Team: "x", Name: "data", SizeMB: 64, Token: "ta", CreatedAt: now},
		{ID: "volb", Team: "x", Name: "cache", SizeMB: 128, Token: "tb", CreatedAt: now},
		{ID: "volc", Team: "y", Name: "data", SizeMB: 64, Token: "tc", CreatedAt: now, Node: "node-b"},
	} {
		if err := d.InsertVolume(ctx, v); err != nil {
			t.Fatalf("insert %s: %v", v.ID, err)
		}
	}
	for _, tc := range []struct {
		name string
		v    store.Volume
		want error
	}{
		{"same id", store.Volume{ID: "vola", Team: "y", Name: "other", SizeMB: 1, Token: "t"}, errdefs.ErrAlreadyExists},
		{"same name", store.Volume{ID: "vold", Team: "x", Name: "data", SizeMB: 1, Token: "t"}, errdefs.ErrAlreadyExists},
		{"no team", store.Volume{ID: "vole", Name: "n", SizeMB: 1, Token: "t"}, errdefs.ErrInvalidArgument},
		{"no size", store.Volume{ID: "volf", Team: "x", Name: "n", Token: "t"}, errdefs.ErrInvalidArgument},
	} {
		if err := d.InsertVolume(ctx, tc.v); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	got, err := d.GetVolume(ctx, "x", "data")
	if err != nil || got.ID != "vola" || got.SizeMB != 64 || got.Token != "ta" || !got.CreatedAt.Equal(now) || got.Node != "" {
		t.Fatalf("get by name: %+v, %v", got, err)
	}
	if got, err = d.GetVolume(ctx, "", "volc"); err != nil || got.Team != "y" || got.Node != "node-b" {
		t.Fatalf("get any team's by ID: %+v, %v", got, err)
	}
	for _, ref := range []string{"volc", "nope"} {
		if _, err := d.GetVolume(ctx, "x", ref); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("get %s as x: err = %v, want not found", ref, err)
		}
	}
	list, err := d.ListVolumes(ctx, "x")
	if err != nil || len(list) != 2 || list[0].Name != "cache" || list[1].Name != "data" {
		t.Fatalf("list x: %+v, %v", list, err)
	}
	if err := d.DeleteVolume(ctx, "x", "volc"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("delete another team's: err = %v, want not found", err)
	}
	if err := d.DeleteVolume(ctx, "x", "vola"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.GetVolume(ctx, "x", "vola"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get deleted: err = %v", err)
	}
	// A sandbox records the volumes it mounts; they survive an update.
	mounts := []store.VolumeMount{{VolumeID: "volb", Name: "cache", Path: "/mnt/cache"}}
	sb := store.Sandbox{ID: "ivol", Team: "x", TemplateID: "t", State: store.StateRunning, StartedAt: now,
		EndAt: now.Add(time.Minute), VolumeMounts: mounts}
	if err := d.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	sb.State = store.StatePaused
	if err := d.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got, err := d.GetSandbox(ctx, "ivol"); err != nil || len(got.VolumeMounts) != 1 || got.VolumeMounts[0] != mounts[0] {
		t.Fatalf("sandbox volume mounts: %+v, %v", got.VolumeMounts, err)
	}
	// The name is free again.
	if err := d.InsertVolume(ctx, store.Volume{ID: "volg", Team: "x", Name: "data", SizeMB: 1, Token: "t"}); err != nil {
		t.Errorf("reuse name: %v", err)
	}
}
