package orchestrator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

func TestSnapshotAndCreateFromIt(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	src := create(t, env, orchestrator.CreateRequest{Secure: true, EnvVars: map[string]string{"A": "src", "B": "src"}})
	var gotSpec runtime.Spec
	env.Runtime.CreateF = func(s runtime.Spec) error { gotSpec = s; return nil }

	snap, err := env.Orch.Snapshot(ctx, team, src.ID, "named")
	if err != nil {
		t.Fatal(err)
	}
	if snap.SandboxID != src.ID || snap.TemplateID != src.TemplateID || snap.MemoryMB != src.MemoryMB || snap.Runtime != "fake" {
		t.Fatalf("snapshot %+v", snap)
	}
	if _, err := env.Orch.Snapshot(ctx, team, src.ID, "named"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate name: %v", err)
	}
	// The fork's envd starts with the source's token and takes its own.
	fork := create(t, env, orchestrator.CreateRequest{Team: team, Template: "named", Secure: true, EnvVars: map[string]string{"B": "fork"}})
	if gotSpec.Snapshot != snap.ID || fork.TemplateID != src.TemplateID || fork.EnvVars["A"] != "src" || fork.EnvVars["B"] != "fork" {
		t.Fatalf("fork spec %+v sandbox %+v", gotSpec, fork)
	}
	if in, _ := env.Runtime.Init(fork.ID); in.AccessToken == nil || *in.AccessToken != fork.EnvdAccessToken || fork.EnvdAccessToken == src.EnvdAccessToken {
		t.Fatalf("fork token: init %+v", in)
	}
	// The source keeps running; a paused one cannot be snapshotted.
	if err := env.Orch.Pause(ctx, team, src.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Orch.Snapshot(ctx, team, src.ID, ""); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("snapshot of paused: %v", err)
	}
	if err := env.Orch.DeleteSnapshot(ctx, team, "named"); err != nil {
		t.Fatal(err)
	}
	if env.Runtime.HasSnapshot(snap.ID) {
		t.Fatal("runtime kept it")
	}
	if _, err := env.Orch.Create(ctx, orchestrator.CreateRequest{Team: team, Template: snap.ID, Timeout: time.Minute}); !errdefs.IsNotFound(err) {
		t.Fatalf("create from deleted: %v", err)
	}
	if err := env.Orch.DeleteSnapshot(ctx, team, snap.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestWakeAutoResume(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	auto := create(t, env, orchestrator.CreateRequest{Secure: true, AutoPause: true, AutoResume: true, Timeout: 90 * time.Second})
	plain := create(t, env, orchestrator.CreateRequest{AutoPause: true})
	for _, id := range []string{auto.ID, plain.ID} {
		if err := env.Orch.Pause(ctx, team, id); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := env.Orch.Lookup(auto.ID)
	rt, err := env.Orch.Wake(ctx, auto.ID)
	if err != nil || rt.State != store.StateRunning || rt.Gen != before.Gen+1 {
		t.Fatalf("wake: %+v %v (before %+v)", rt, err, before)
	}
	sb, _ := env.Orch.Get(ctx, team, auto.ID)
	if d := sb.EndAt.Sub(sb.StartedAt); d < 89*time.Second || d > 91*time.Second {
		t.Fatalf("auto-resume gave %s, want the create-time 90 s", d)
	}
	if n := env.Runtime.InitCount(auto.ID); n != 2 {
		t.Fatalf("envd accepted %d /init calls, want 2 (create and resume)", n)
	}
	// Waking a running sandbox is a no-op; one without auto-resume stays paused.
	if rt2, err := env.Orch.Wake(ctx, auto.ID); err != nil || rt2.Gen != rt.Gen {
		t.Fatalf("second wake: %+v %v", rt2, err)
	}
	if _, err := env.Orch.Wake(ctx, plain.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("wake without auto-resume: %v", err)
	}
	if _, err := env.Orch.Wake(ctx, "inope"); !errdefs.IsNotFound(err) {
		t.Fatalf("wake unknown: %v", err)
	}
}

func TestRecoverTrustsRuntimePauseState(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	a := create(t, env, orchestrator.CreateRequest{})
	// The store says "pausing" (a crash mid-pause) but the runtime finished it.
	if err := env.Runtime.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	row, _ := env.DB.GetSandbox(ctx, a.ID)
	row.State = store.StatePausing
	if err := env.DB.UpdateSandbox(ctx, row); err != nil {
		t.Fatal(err)
	}
	o2, err := orchestrator.New(orchestrator.Config{Store: env.DB, Runtime: env.Runtime, EnvdPort: env.Runtime.EnvdPort})
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if rt, ok := o2.Lookup(a.ID); !ok || rt.State != store.StatePaused {
		t.Fatalf("recovered %+v %v", rt, ok)
	}
}

func TestResumeFailures(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	sb := create(t, env, orchestrator.CreateRequest{})
	if err := env.Orch.Pause(ctx, team, sb.ID); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	// A resume that fails before the guest ran leaves it paused and retryable.
	env.Runtime.ResumeF = func(string) (bool, error) { return false, boom }
	if _, _, err := env.Orch.Connect(ctx, team, sb.ID, time.Minute); !errors.Is(err, boom) {
		t.Fatalf("connect: %v", err)
	}
	if rt, _ := env.Orch.Lookup(sb.ID); rt.State != store.StatePaused {
		t.Fatalf("after failed resume: %+v", rt)
	}
	// One that ran but is unhealthy is recorded as running.
	env.Runtime.ResumeF = func(string) (bool, error) { return true, boom }
	if _, _, err := env.Orch.Connect(ctx, team, sb.ID, time.Minute); !errors.Is(err, boom) {
		t.Fatalf("connect: %v", err)
	}
	if rt, _ := env.Orch.Lookup(sb.ID); rt.State != store.StateRunning {
		t.Fatalf("after unhealthy resume: %+v", rt)
	}
	if row, _ := env.DB.GetSandbox(ctx, sb.ID); row.State != store.StateRunning {
		t.Fatalf("stored state %q", row.State)
	}
}

// TestTransitionsAreStored: while a pause runs, the store says "pausing"
// too, so list (from the store) and getInfo (from memory) agree.
func TestTransitionsAreStored(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	sb := create(t, env, orchestrator.CreateRequest{})
	inPause, release := make(chan struct{}), make(chan struct{})
	env.Runtime.PauseF = func(string) error { close(inPause); <-release; return nil }
	done := make(chan error, 1)
	go func() { done <- env.Orch.Pause(ctx, team, sb.ID) }()
	<-inPause
	row, err := env.DB.GetSandbox(ctx, sb.ID)
	close(release)
	if err != nil || row.State != store.StatePausing {
		t.Fatalf("stored state during pause: %q %v", row.State, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if row, _ := env.DB.GetSandbox(ctx, sb.ID); row.State != store.StatePaused {
		t.Fatalf("stored state after pause: %q", row.State)
	}
}

// TestDeleteSnapshotWaitsForCreates: a delete that arrives while a create
// copies the snapshot waits for that copy; a create that starts after the
// delete answers 404.
func TestDeleteSnapshotWaitsForCreates(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	src := create(t, env, orchestrator.CreateRequest{})
	snap, err := env.Orch.Snapshot(ctx, team, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	copying, release := make(chan struct{}), make(chan struct{})
	sawSnapshot := make(chan bool, 1)
	env.Runtime.CreateF = func(s runtime.Spec) error {
		if s.Snapshot == "" {
			return nil
		}
		close(copying)
		<-release
		sawSnapshot <- env.Runtime.HasSnapshot(s.Snapshot)
		return nil
	}
	created := make(chan error, 1)
	go func() {
		_, err := env.Orch.Create(ctx, orchestrator.CreateRequest{Team: team, Template: snap.ID, Timeout: time.Minute})
		created <- err
	}()
	<-copying
	deleted := make(chan error, 1)
	go func() { deleted <- env.Orch.DeleteSnapshot(ctx, team, snap.ID) }()
	select {
	case err := <-deleted:
		t.Fatalf("delete returned during the copy: %v", err)
	case <-time.After(100 * time.Millisecond): // a negative check: time for a wrong return
	}
	close(release)
	if err := <-created; err != nil {
		t.Fatalf("create: %v", err)
	}
	if !<-sawSnapshot {
		t.Fatal("the snapshot's files were deleted during the copy")
	}
	if err := <-deleted; err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := env.Orch.Create(ctx, orchestrator.CreateRequest{Team: team, Template: snap.ID, Timeout: time.Minute}); !errdefs.IsNotFound(err) {
		t.Fatalf("create after delete: %v", err)
	}
}

// TestSnapshotWithVolumesRefused: a sandbox that mounts volumes cannot be
// snapshotted or forked (400), and keeps running.
func TestSnapshotWithVolumesRefused(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	src := create(t, env, orchestrator.CreateRequest{Volumes: []orchestrator.VolumeMount{
		{VolumeMount: store.VolumeMount{VolumeID: "vol1", Name: "data", Path: "/data"}, Source: "/nonexistent"}}})
	if _, err := env.Orch.Snapshot(ctx, team, src.ID, ""); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("snapshot of a sandbox with volumes: %v, want invalid argument", err)
	}
	if _, err := env.Orch.Fork(ctx, team, src.ID, 1, time.Minute); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("fork of a sandbox with volumes: %v, want invalid argument", err)
	}
	if sb, err := env.Orch.Get(ctx, team, src.ID); err != nil || sb.State != store.StateRunning {
		t.Fatalf("source after the refusals: %+v, %v", sb, err)
	}
}
