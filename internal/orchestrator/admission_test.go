package orchestrator_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/testkit"
)

// TestAdmission: with one slot and no queue, a second create while the
// first is in the runtime is refused at once (429 kind, Retry-After); a
// create the host has no room for is refused (503 kind) before the runtime
// is asked; a create whose client gives up while queued starts nothing.
func TestAdmission(t *testing.T) {
	var room error
	var mu sync.Mutex
	adm := admission.New(admission.Config{Concurrency: 1, Queue: 1, Room: func(n admission.Need) error {
		mu.Lock()
		defer mu.Unlock()
		return room
	}})
	env := orchestratortest.New(t, orchestrator.Config{Admission: adm})
	ctx := context.Background()
	req := orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute}

	inRuntime, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	env.Runtime.CreateF = func(runtime.Spec) error {
		once.Do(func() { close(inRuntime); <-unblock })
		return nil
	}
	first := make(chan error, 1)
	go func() { _, err := env.Orch.Create(ctx, req); first <- err }()
	<-inRuntime

	// One may wait; its client gives up.
	qctx, cancel := context.WithCancel(ctx)
	queued := make(chan error, 1)
	go func() { _, err := env.Orch.Create(qctx, req); queued <- err }()
	testkit.WaitFor(t, 5*time.Second, "the second create to wait for admission", func() bool { return adm.Stats().Waiting == 1 })
	// The queue is full: refused at once.
	_, err := env.Orch.Create(ctx, req)
	var re *admission.RetryError
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !errors.As(err, &re) {
		t.Fatalf("create at capacity = %v, want ErrResourceExhausted with Retry-After", err)
	}
	if code, _ := errdefs.ErrorCode(err); code != errdefs.CodeCapacityUnavailable {
		t.Fatalf("error_code %q", code)
	}
	cancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned create = %v", err)
	}
	close(unblock)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := env.Runtime.Count(); n != 1 {
		t.Fatalf("%d sandboxes in the runtime, want 1", n)
	}
	if got := env.Orch.Reserved(); got.MemoryMiB != 512 || got.DiskMiB != 1024 {
		t.Fatalf("Reserved = %+v, want the template's 512 MiB / 1024 MiB", got)
	}

	mu.Lock()
	room = errors.New("no memory")
	mu.Unlock()
	_, err = env.Orch.Create(ctx, req)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("create on a full host = %v, want ErrUnavailable", err)
	}
	if code, _ := errdefs.ErrorCode(err); code != errdefs.CodeCapacityUnavailable {
		t.Fatalf("error_code %q", code)
	}
	if n := env.Runtime.Count(); n != 1 {
		t.Fatalf("a refused create reached the runtime: %d sandboxes", n)
	}
	if s := adm.Stats(); s != (admission.Stats{}) {
		t.Fatalf("admission slots held after everything finished: %+v", s)
	}
}

// TestTwoTeamsBurstBothProgress: a team that bursts after another is
// served in turn: all its creates finish while most of the first team's
// burst still waits.
func TestTwoTeamsBurstBothProgress(t *testing.T) {
	adm := admission.New(admission.Config{Concurrency: 2, MaxWait: time.Hour})
	env := orchestratortest.New(t, orchestrator.Config{Admission: adm})
	env.Runtime.CreateF = func(runtime.Spec) error { time.Sleep(20 * time.Millisecond); return nil }
	ctx := context.Background()
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	burst := func(team string, n int) {
		for range n {
			wg.Go(func() {
				if _, err := env.Orch.Create(ctx, orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, team)
				mu.Unlock()
			})
		}
	}
	burst("team-a", 30)
	testkit.WaitFor(t, 5*time.Second, "team a's burst to queue", func() bool { return adm.Stats().Waiting >= 20 })
	burst("team-b", 5)
	wg.Wait()
	lastB := 0
	for i, team := range order {
		if team == "team-b" {
			lastB = i
		}
	}
	// Turns alternate: b's fifth is done within about ten more creates.
	if lastB > 20 {
		t.Fatalf("team b's last create finished %d of %d: %v", lastB+1, len(order), order)
	}
}
