package orchestrator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/store"
)

// TestTeamsIsolation: every team-scoped operation on another team's sandbox
// fails exactly like one on an unknown ID (same kind, same message with the
// ID substituted), and changes nothing.
func TestTeamsIsolation(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	o := env.Orch
	a := create(t, env, orchestrator.CreateRequest{Team: "a", Secure: true, Metadata: map[string]string{"k": "v"}})
	if a.Team != "a" {
		t.Fatalf("created for team %q", a.Team)
	}
	if _, err := o.Snapshot(ctx, "a", a.ID, "a-snap"); err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		f    func(team, id string) error
	}{
		{"get", func(tm, id string) error { _, err := o.Get(ctx, tm, id); return err }},
		{"kill", func(tm, id string) error { return o.Kill(ctx, tm, id) }},
		{"pause", func(tm, id string) error { return o.Pause(ctx, tm, id) }},
		{"resume", func(tm, id string) error { _, err := o.Resume(ctx, tm, id, time.Minute); return err }},
		{"connect", func(tm, id string) error { _, _, err := o.Connect(ctx, tm, id, time.Minute); return err }},
		{"refresh", func(tm, id string) error { return o.Refresh(ctx, tm, id, time.Minute) }},
		{"set timeout", func(tm, id string) error { return o.SetTimeout(ctx, tm, id, time.Minute) }},
		{"metrics", func(tm, id string) error { _, err := o.Metrics(ctx, tm, id, time.Time{}, time.Time{}); return err }},
		{"snapshot", func(tm, id string) error { _, err := o.Snapshot(ctx, tm, id, ""); return err }},
		{"fork", func(tm, id string) error { _, err := o.Fork(ctx, tm, id, 1, time.Minute); return err }},
	}
	const unknown = "iunknown0000000000000"
	for _, op := range ops {
		for _, team := range []string{"b", ""} {
			t.Run(op.name+"/team="+team, func(t *testing.T) {
				errOther := op.f(team, a.ID)
				errUnknown := op.f("a", unknown)
				if !errdefs.IsNotFound(errOther) || !errdefs.IsNotFound(errUnknown) {
					t.Fatalf("other team: %v; unknown: %v", errOther, errUnknown)
				}
				if want := replaceID(errUnknown.Error(), unknown, a.ID); errOther.Error() != want {
					t.Fatalf("message %q, want %q", errOther, want)
				}
			})
		}
	}
	// Nothing happened to a's sandbox.
	got, err := o.Get(ctx, "a", a.ID)
	if err != nil || got.State != store.StateRunning || !got.EndAt.Equal(a.EndAt) {
		t.Fatalf("a's sandbox changed: %+v, %v", got, err)
	}

	// Lists are scoped; the filter's Team cannot widen them.
	b := create(t, env, orchestrator.CreateRequest{Team: "b", Metadata: map[string]string{"k": "v"}})
	for _, tc := range []struct {
		team string
		f    store.SandboxFilter
		want string
	}{
		{"a", store.SandboxFilter{}, a.ID},
		{"b", store.SandboxFilter{}, b.ID},
		{"b", store.SandboxFilter{Team: "a"}, b.ID},
		{"b", store.SandboxFilter{Metadata: map[string]string{"k": "v"}}, b.ID},
	} {
		rows, err := o.List(ctx, tc.team, tc.f)
		if err != nil || len(rows) != 1 || rows[0].ID != tc.want {
			t.Errorf("List(%s, %+v) = %v, %v; want only %s", tc.team, tc.f, rows, err, tc.want)
		}
	}
	if _, err := o.List(ctx, "", store.SandboxFilter{}); err == nil {
		t.Error("List without a team succeeded")
	}

	// Snapshots: invisible, unusable and undeletable by another team.
	if snaps, err := o.ListSnapshots(ctx, "b", store.SnapshotFilter{SandboxID: a.ID}); err != nil || len(snaps) != 0 {
		t.Errorf("b lists a's snapshots: %v, %v", snaps, err)
	}
	if snaps, err := o.ListSnapshots(ctx, "a", store.SnapshotFilter{}); err != nil || len(snaps) != 1 {
		t.Errorf("a's snapshots: %v, %v", snaps, err)
	}
	if _, err := o.Create(ctx, orchestrator.CreateRequest{Team: "b", Template: "a-snap", Timeout: time.Minute}); !errdefs.IsNotFound(err) {
		t.Errorf("b creates from a's snapshot: %v", err)
	}
	if err := o.DeleteSnapshot(ctx, "b", "a-snap"); !errdefs.IsNotFound(err) {
		t.Errorf("b deletes a's snapshot: %v", err)
	}
	// b may use the same snapshot name for its own.
	if _, err := o.Snapshot(ctx, "b", b.ID, "a-snap"); err != nil {
		t.Errorf("b's snapshot with a's name: %v", err)
	}
	fromSnap, err := o.Create(ctx, orchestrator.CreateRequest{Team: "a", Template: "a-snap", Timeout: time.Minute})
	if err != nil || fromSnap.Team != "a" {
		t.Fatalf("a creates from its snapshot: %+v, %v", fromSnap, err)
	}
	if err := o.DeleteSnapshot(ctx, "a", "a-snap"); err != nil {
		t.Errorf("a deletes its snapshot: %v", err)
	}

	// Forks belong to the caller's team.
	forks, err := o.Fork(ctx, "a", a.ID, 1, time.Minute)
	if err != nil || len(forks) != 1 || forks[0].Err != nil || forks[0].Sandbox.Team != "a" {
		t.Fatalf("fork: %+v, %v", forks, err)
	}

	// Templates are every team's; a create needs a valid team.
	if _, err := o.Create(ctx, orchestrator.CreateRequest{Template: "base", Timeout: time.Minute}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("create without a team: %v", err)
	}

	// The proxy's auto-resume acts for no team.
	if _, err := o.Wake(ctx, a.ID); err != nil {
		t.Errorf("wake: %v", err)
	}

	// A restarted server keeps each sandbox's team.
	o2, err := orchestrator.New(orchestrator.Config{Store: env.DB, Runtime: env.Runtime, EnvdPort: env.Runtime.EnvdPort})
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := o2.Get(ctx, "b", a.ID); !errdefs.IsNotFound(err) {
		t.Errorf("after recover, b gets a's sandbox: %v", err)
	}
	if got, err := o2.Get(ctx, "a", a.ID); err != nil || got.Team != "a" {
		t.Errorf("after recover, a's sandbox: %+v, %v", got, err)
	}
	if err := o2.Kill(ctx, "b", b.ID); err != nil {
		t.Errorf("after recover, b kills its sandbox: %v", err)
	}
}

func replaceID(s, from, to string) string { return strings.ReplaceAll(s, from, to) }
