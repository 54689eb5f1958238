package jupyter

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/testkit"
)

// startPython starts a real ipykernel; without python3 or ipykernel it is
// testkit.Missing (a failure under MOAT_TEST_REQUIRE=1).
func startPython(t *testing.T) *Kernel {
	t.Helper()
	spec := PythonSpec("")
	if err := spec.LookPath(); err != nil {
		testkit.Missing(t, "no python for the kernel (apt-get install python3-ipykernel): %v", err)
	}
	if out, err := exec.Command(spec.Argv[0], "-c", "import ipykernel").CombinedOutput(); err != nil {
		testkit.Missing(t, "ipykernel not importable by %s (apt-get install python3-ipykernel): %v: %s", spec.Argv[0], err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := Start(ctx, spec, Options{ConnDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = k.Shutdown(context.Background()) })
	return k
}

// collect runs code and returns the IOPub message types and stdout text.
func collect(t *testing.T, ctx context.Context, k *Kernel, code string) (ExecuteReply, []string, string, error) {
	t.Helper()
	var types []string
	var out strings.Builder
	reply, err := k.Execute(ctx, code, func(m Message) {
		types = append(types, m.Type())
		if m.Type() == "stream" {
			var c struct{ Text string }
			_ = m.DecodeContent(&c)
			out.WriteString(c.Text)
		}
	})
	return reply, types, out.String(), err
}

func TestKernelLifecycle(t *testing.T) {
	k := startPython(t)
	ctx := context.Background()

	reply, types, out, err := collect(t, ctx, k, "x = 40\nprint(x + 2)")
	if err != nil || reply.Status != "ok" || out != "42\n" {
		t.Fatalf("execute: reply=%+v out=%q err=%v types=%v", reply, out, err, types)
	}
	if types[0] != "status" || types[len(types)-1] != "status" {
		t.Errorf("types = %v, want status first and last", types)
	}
	if !k.Alive(ctx, 5*time.Second) {
		t.Errorf("Alive = false on a running kernel")
	}

	// Interrupt an infinite loop through ctx cancellation.
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	reply, _, _, err = collect(t, cctx, k, "while True: pass")
	if err == nil || reply.EName != "KeyboardInterrupt" {
		t.Fatalf("interrupted execute: reply=%+v err=%v", reply, err)
	}
	if reply, _, out, err = collect(t, ctx, k, "print(x)"); err != nil || out != "40\n" {
		t.Fatalf("after interrupt: reply=%+v out=%q err=%v", reply, out, err)
	}

	// Kernel death is reported, restart clears state.
	_, _, _, err = collect(t, ctx, k, "import os; os._exit(1)")
	if !errors.Is(err, ErrKernelDied) {
		t.Fatalf("os._exit: err = %v, want ErrKernelDied", err)
	}
	if err := k.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	reply, _, _, err = collect(t, ctx, k, "x")
	if err != nil || reply.EName != "NameError" {
		t.Fatalf("after restart: reply=%+v err=%v", reply, err)
	}
}

// TestLateResultGrace: output a kernel publishes shortly after idle reaches
// the handler only when the spec asks for a grace period (Deno's kernel
// publishes execute_result late; Python stands in for it here).
func TestLateResultGrace(t *testing.T) {
	k := startPython(t)
	ctx := context.Background()
	late := "import threading, sys\nthreading.Timer(0.1, lambda: (print('late'), sys.stdout.flush())).start()"
	for _, tc := range []struct {
		grace time.Duration
		want  bool
	}{{0, false}, {time.Second, true}} {
		k.spec.LateResultGrace = tc.grace
		_, _, out, err := collect(t, ctx, k, late)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out, "late"); got != tc.want {
			t.Errorf("grace %s: late output seen = %v, want %v (out %q)", tc.grace, got, tc.want, out)
		}
		time.Sleep(300 * time.Millisecond) // not before an assertion: a missed late print drains, not into the next case
	}
}
