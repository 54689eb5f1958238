package admission

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRefusals counts each kind of refusal once: a full queue, a wait too
// long, and no room when the turn comes.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	full := New(Config{Concurrency: 1, Queue: -1, MaxWait: time.Hour})
	rel, err := full.Admit(ctx, create("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := full.Admit(ctx, create("a")); err == nil {
		t.Fatal("admit with the queue full: want a refusal")
	}
	rel()

	long := New(Config{Concurrency: 1, MaxWait: time.Millisecond})
	rel, err = long.Admit(ctx, create("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Admit(ctx, create("b")); err == nil {
		t.Fatal("admit with a wait past MaxWait: want a refusal")
	}
	rel()

	noRoom := New(Config{Room: func(Need) error { return errors.New("full") }})
	if _, err := noRoom.Admit(ctx, Request{Op: "create", Team: "a", Need: Need{MemoryMiB: 1}}); err == nil {
		t.Fatal("admit without room: want a refusal")
	}
	if _, err := noRoom.Admit(ctx, create("a")); err != nil { // no Need: Room is not asked
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		c    *Controller
		want Refusals
	}{
		{"queue full", full, Refusals{QueueFull: 1}},
		{"wait", long, Refusals{Wait: 1}},
		{"room", noRoom, Refusals{Room: 1}},
	} {
		if got := tc.c.Refusals(); got != tc.want {
			t.Errorf("%s: refusals %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
