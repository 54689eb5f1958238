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
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

// TestPauseFilesystem: a pause with memory: false reaches the runtime's
// filesystem pause and is recorded; traffic does not wake such a sandbox
// even with auto-resume, connect does (envd initialised again), and the
// record forgets the kind once it runs.
func TestPauseFilesystem(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	o := env.Orch
	sb := create(t, env, orchestrator.CreateRequest{Secure: true, AutoPause: true, AutoResume: true})
	if err := o.PauseFilesystem(ctx, team, sb.ID); err != nil {
		t.Fatal(err)
	}
	if st := env.Runtime.State(sb.ID); st != "paused-fs" {
		t.Fatalf("runtime state %q, want paused-fs", st)
	}
	got, _ := o.Get(ctx, team, sb.ID)
	if got.State != store.StatePaused || !got.PausedFilesystem {
		t.Fatalf("after the pause: %+v", got)
	}
	if err := o.PauseFilesystem(ctx, team, sb.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second pause: %v", err)
	}
	if _, err := o.Wake(ctx, sb.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("traffic woke a filesystem-paused sandbox: %v", err)
	}
	got, resumed, err := o.Connect(ctx, team, sb.ID, time.Minute)
	if err != nil || !resumed || got.State != store.StateRunning || got.PausedFilesystem {
		t.Fatalf("connect: %+v %v %v", got, resumed, err)
	}
	if n := env.Runtime.InitCount(sb.ID); n != 2 {
		t.Fatalf("envd got %d /init calls, want 2 (create and resume)", n)
	}
	if rec, _ := env.DB.GetSandbox(ctx, sb.ID); rec.PausedFilesystem {
		t.Fatal("the store still says paused to its files")
	}
	if err := o.PauseFilesystem(ctx, team, "inope"); !errdefs.IsNotFound(err) {
		t.Fatalf("unknown id: %v", err)
	}
}

// TestAutoPauseFilesystem: a sandbox created with AutoPauseFS is paused to
// its files when its time is up.
func TestAutoPauseFilesystem(t *testing.T) {
	ctx := context.Background()
	clock := orchestratortest.NewClock()
	env := orchestratortest.New(t, orchestrator.Config{Clock: clock})
	fs := create(t, env, orchestrator.CreateRequest{Timeout: time.Second, AutoPause: true, AutoPauseFS: true})
	mem := create(t, env, orchestrator.CreateRequest{Timeout: time.Second, AutoPause: true})
	clock.Advance(2 * time.Second)
	run(t, env)
	testkit.WaitFor(t, reaperWait, "both auto-paused", func() bool {
		return env.Runtime.State(fs.ID) == "paused-fs" && env.Runtime.State(mem.ID) == "paused"
	})
	if got, _ := env.Orch.Get(ctx, team, fs.ID); !got.PausedFilesystem || !got.AutoPauseFilesystem {
		t.Fatalf("record: %+v", got)
	}
}

// memOnly is a backend without a filesystem-only pause (as the vm
// backend today): only runtime.Runtime's methods of a fake.
type memOnly struct{ runtime.Runtime }

func (memOnly) Name() string { return "memonly" }

// TestPauseFilesystemRefused: on a backend that cannot drop the memory, a
// pause with memory: false is refused with ErrNotImplemented naming the
// runtime, and the sandbox keeps running untouched.
func TestPauseFilesystemRefused(t *testing.T) {
	ctx := context.Background()
	fake := orchestratortest.NewRuntime(t)
	env := orchestratortest.New(t, orchestrator.Config{Runtimes: []runtime.Runtime{memOnly{fake}}})
	sb := create(t, env, orchestrator.CreateRequest{Metadata: map[string]string{orchestrator.MetadataRuntime: "memonly"}})
	err := env.Orch.PauseFilesystem(ctx, team, sb.ID)
	if !errors.Is(err, errdefs.ErrNotImplemented) || !strings.Contains(err.Error(), "memonly") {
		t.Fatalf("filesystem-only pause on memonly: %v; want ErrNotImplemented naming it", err)
	}
	if got, _ := env.Orch.Get(ctx, team, sb.ID); got.State != store.StateRunning || fake.State(sb.ID) != "running" {
		t.Fatalf("after the refusal: %s, runtime %s", got.State, fake.State(sb.ID))
	}
}
