package runtime_test

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/runtime"
)

// A Process's Wait blocks while the process runs, ends with its context
// without disturbing other waits, and returns soon after the process dies.
func TestProcessWait(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	p, err := runtime.OpenProcess(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Exited() {
		t.Fatal("Exited while it runs")
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a short context = %v, want deadline exceeded", err)
	}
	long := make(chan error, 1)
	go func() { long <- p.Wait(context.Background()) }()
	cancelled, cancel2 := context.WithCancel(context.Background())
	other := make(chan error, 1)
	go func() { other <- p.Wait(cancelled) }()
	cancel2()
	if err := <-other; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait = %v", err)
	}
	select {
	case err := <-long:
		t.Fatalf("Wait returned while the process runs: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	killed := time.Now()
	_ = cmd.Process.Kill()
	select {
	case err := <-long:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Wait returned %v after SIGKILL", time.Since(killed))
	case <-time.After(5 * time.Second):
		t.Fatal("Wait blocked 5 s after the process died")
	}
	if !p.Exited() {
		t.Error("not Exited after it died")
	}
	_ = cmd.Wait()
}
