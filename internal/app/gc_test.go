package app

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestGCIsOwnedByTheRunLoop checks that the collector runs at once and
// then periodically, stops when its context ends, and that wait returns
// only after a collection under way has finished (Serve closes the store
// after it).
func TestGCIsOwnedByTheRunLoop(t *testing.T) {
	var mu sync.Mutex
	var ages []time.Duration
	running := false
	third := make(chan struct{})
	collect := func(ctx context.Context, minAge time.Duration) {
		mu.Lock()
		running = true
		ages = append(ages, minAge)
		n := len(ages)
		mu.Unlock()
		if n == 3 {
			close(third)
			<-ctx.Done() // a long collection, cut by shutdown
			time.Sleep(50 * time.Millisecond)
		}
		mu.Lock()
		running = false
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := startGC(ctx, 5*time.Millisecond, collect)
	select {
	case <-third:
	case <-time.After(10 * time.Second):
		t.Fatal("the collector did not run three times")
	}
	cancel()
	wait()
	mu.Lock()
	defer mu.Unlock()
	if running {
		t.Fatal("wait returned while a collection was running")
	}
	if len(ages) != 3 || ages[0] != time.Minute || ages[1] != 5*time.Millisecond {
		t.Fatalf("collections with min ages %v, want 1m then the interval", ages)
	}
	n := len(ages)
	mu.Unlock()
	time.Sleep(30 * time.Millisecond) // a negative check: six intervals in which no collection may start
	mu.Lock()
	if len(ages) != n {
		t.Fatalf("collected %d more times after wait returned", len(ages)-n)
	}
}
