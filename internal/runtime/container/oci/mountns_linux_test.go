package oci

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/testkit"
)

// TestStartHiddenHidesCgroup2 checks that a command started by RunCmd on a
// hybrid host does not see the cgroup2 mount, and that the host keeps it.
func TestStartHiddenHidesCgroup2(t *testing.T) {
	testkit.RequireRoot(t)
	if !isHybrid() {
		t.Skip("by design: not a hybrid cgroup host (no cgroup2 mounted on " + cgroup2Mount + "): nothing to hide")
	}
	count := func(o *CLI) string {
		var out strings.Builder
		cmd := exec.Command("grep", "-c", " "+cgroup2Mount+" ", "/proc/self/mountinfo")
		cmd.Stdout = &out
		_ = o.RunCmd(cmd) // grep exits 1 when it counts 0
		return strings.TrimSpace(out.String())
	}
	for range 3 { // a fresh thread and namespace each time
		if got := count(&CLI{hideCgroup2: true}); got != "0" {
			t.Fatalf("hidden command sees %s cgroup2 mounts, want 0", got)
		}
	}
	if got := count(&CLI{}); got == "0" {
		t.Fatalf("the host lost its cgroup2 mount")
	}
}
