package container

import (
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/runtime"
)

// TestEnvdReapsOrphans: envd is the sandbox's PID 1 and its only process
// of its own (no re-executed child), and a process orphaned inside the
// sandbox is reaped once it exits instead of staying a zombie.
func TestEnvdReapsOrphans(t *testing.T) {
	r := newTestRuntime(t, "") // the default OCI runtime: runc exec cannot join the host-owned netns
	h := create(t, r, runtime.Spec{})
	if out, err := execIn(r, h.ID, "cat", "/proc/1/cmdline"); err != nil || !strings.HasPrefix(out, "/usr/local/bin/envd") {
		t.Fatalf("PID 1 is %q (%v), want envd", out, err)
	}
	out, err := execIn(r, h.ID, "sh", "-c", "cat /proc/[0-9]*/comm")
	if n := strings.Count("\n"+out, "\nenvd\n"); err != nil || n != 1 {
		t.Fatalf("%d envd processes (%v), want 1; commands: %q", n, err, out)
	}
	// The shell exits at once; its background sleep becomes PID 1's.
	out, err = execIn(r, h.ID, "sh", "-c", "sleep 0.2 >/dev/null 2>&1 & echo $!")
	if err != nil {
		t.Fatalf("start orphan: %v: %s", err, out)
	}
	pid := strings.TrimSpace(out)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := execIn(r, h.ID, "sh", "-c", "cat /proc/"+pid+"/stat 2>/dev/null || echo gone")
		if err == nil && strings.TrimSpace(st) == "gone" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %s not reaped: %q (%v)", pid, st, err)
		}
	}
}
