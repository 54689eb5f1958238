package orchestrator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/testkit"
)

// TestEvents: each change of a sandbox makes E2B's event, in order, with
// the run (execution ID) changing at a resume.
func TestEvents(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var got []events.Event
	env := orchestratortest.New(t, orchestrator.Config{Events: func(_ context.Context, ev events.Event) {
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	}})
	o := env.Orch
	sb := create(t, env, orchestrator.CreateRequest{Metadata: map[string]string{"user": "u1"}})
	steps := []func() error{
		func() error { return o.SetTimeout(ctx, team, sb.ID, 2*time.Minute) },
		func() error {
			_, err := o.UpdateNetwork(ctx, team, sb.ID, orchestrator.NetworkUpdate{DenyOut: []string{"0.0.0.0/0"}})
			return err
		},
		func() error { return o.Pause(ctx, team, sb.ID) },
		func() error { _, err := o.Resume(ctx, team, sb.ID, time.Minute); return err },
		func() error { return o.Refresh(ctx, team, sb.ID, 10*time.Minute) },
		func() error { return o.Kill(ctx, team, sb.ID) },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	// failed operations make no event
	if err := o.Kill(ctx, team, sb.ID); err == nil {
		t.Fatal("second kill succeeded")
	}
	want := []string{events.Created, events.Updated, events.Updated, events.Paused, events.Resumed, events.Updated, events.Killed}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	for i, ev := range got {
		if ev.Type != want[i] || ev.SandboxID != sb.ID || ev.TeamID != team || ev.TemplateID != "tplbase" {
			t.Errorf("event %d = %s %s %s %s, want %s", i, ev.Type, ev.SandboxID, ev.TeamID, ev.TemplateID, want[i])
		}
		if md, _ := ev.EventData["sandbox_metadata"].(map[string]string); md["user"] != "u1" {
			t.Errorf("event %d (%s) has no sandbox_metadata: %v", i, ev.Type, ev.EventData)
		}
		if i > 0 && ev.Timestamp.Before(got[i-1].Timestamp) {
			t.Errorf("event %d is older than event %d", i, i-1)
		}
	}
	if _, ok := got[1].EventData["set_timeout"].(string); !ok {
		t.Errorf("timeout update without set_timeout: %v", got[1].EventData)
	}
	if _, ok := got[2].EventData["network"]; !ok {
		t.Errorf("network update without network: %v", got[2].EventData)
	}
	if _, ok := got[3].EventData["execution"]; !ok {
		t.Errorf("paused without execution: %v", got[3].EventData)
	}
	if got[6].EventData["kill_reason"] != "request" {
		t.Errorf("killed: %v", got[6].EventData)
	}
	run1, run2 := got[0].ExecutionID, got[4].ExecutionID
	if got[3].ExecutionID != run1 || run2 == run1 || got[6].ExecutionID != run2 {
		t.Errorf("execution IDs %s %s %s %s: want one per run", run1, got[3].ExecutionID, run2, got[6].ExecutionID)
	}
}

// TestEventsOfTimeoutsAndSnapshots: the reaper's kill and auto-pause and
// a snapshot make their events too.
func TestEventsOfTimeoutsAndSnapshots(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	byID := map[string][]events.Event{}
	clock := orchestratortest.NewClock()
	env := orchestratortest.New(t, orchestrator.Config{Clock: clock, Events: func(_ context.Context, ev events.Event) {
		mu.Lock()
		byID[ev.SandboxID] = append(byID[ev.SandboxID], ev)
		mu.Unlock()
	}})
	snapped := create(t, env, orchestrator.CreateRequest{Timeout: time.Hour})
	snap, err := env.Orch.Snapshot(ctx, team, snapped.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	killMe := create(t, env, orchestrator.CreateRequest{Timeout: time.Second})
	pauseMe := create(t, env, orchestrator.CreateRequest{Timeout: time.Second, AutoPause: true})
	clock.Advance(2 * time.Second)
	run(t, env)
	last := func(id string) events.Event {
		mu.Lock()
		defer mu.Unlock()
		evs := byID[id]
		if len(evs) == 0 {
			return events.Event{}
		}
		return evs[len(evs)-1]
	}
	testkit.WaitFor(t, reaperWait, "timeout events", func() bool {
		return last(killMe.ID).Type == events.Killed && last(pauseMe.ID).Type == events.Paused
	})
	if r := last(killMe.ID).EventData["kill_reason"]; r != "timeout" {
		t.Errorf("kill_reason %v, want timeout", r)
	}
	if ev := last(snapped.ID); ev.Type != events.Checkpointed || ev.EventData["snapshot_id"] != snap.ID {
		t.Errorf("after a snapshot: %s %v", ev.Type, ev.EventData)
	}
}
