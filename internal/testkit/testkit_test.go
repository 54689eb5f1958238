package testkit

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTB records how a helper ended a test; runtime.Goexit stands for
// FailNow and SkipNow as in testing.
type fakeTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Fatal(a ...any)        { f.failed = true; f.msg = a[0].(string); runtime.Goexit() }
func (f *fakeTB) Skip(a ...any)         { f.skipped = true; f.msg = a[0].(string); runtime.Goexit() }
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true; runtime.Goexit() }

// run calls fn with f on a goroutine of its own, as testing runs a test.
func (f *fakeTB) run(fn func(testing.TB)) *fakeTB {
	done := make(chan struct{})
	go func() { defer close(done); fn(f) }()
	<-done
	return f
}

func TestMissing(t *testing.T) {
	for _, tt := range []struct {
		env             string
		failed, skipped bool
	}{{"1", true, false}, {"", false, true}, {"0", false, true}} {
		t.Setenv(RequireEnv, tt.env)
		f := (&fakeTB{}).run(func(tb testing.TB) { Missing(tb, "no %s", "crun") })
		if f.failed != tt.failed || f.skipped != tt.skipped {
			t.Errorf("%s=%q: failed %v skipped %v, want %v %v", RequireEnv, tt.env, f.failed, f.skipped, tt.failed, tt.skipped)
		}
		if want := "missing prerequisite: no crun"; len(f.msg) < len(want) || f.msg[:len(want)] != want {
			t.Errorf("message %q does not start with %q", f.msg, want)
		}
	}
}

func TestRequireTool(t *testing.T) {
	t.Setenv(RequireEnv, "1")
	var p string
	f := (&fakeTB{}).run(func(tb testing.TB) { p = RequireTool(tb, "no-such-tool-moat", "sh") })
	if p == "" || f.failed {
		t.Fatalf("sh not found: %q failed=%v", p, f.failed)
	}
	f = (&fakeTB{}).run(func(tb testing.TB) { RequireTool(tb, "no-such-tool-moat") })
	if !f.failed {
		t.Fatal("a missing tool did not fail under " + RequireEnv)
	}
}

func TestWaitFor(t *testing.T) {
	var n atomic.Int32
	WaitFor(t, time.Second, "three polls", func() bool { return n.Add(1) >= 3 })
	f := (&fakeTB{}).run(func(tb testing.TB) { WaitFor(tb, 30*time.Millisecond, "never", func() bool { return false }) })
	if !f.failed {
		t.Fatal("WaitFor did not fail after its timeout")
	}
}
