package reaper

import (
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/testkit"
)

// TestReapKeepsOwnChildren makes this test process a subreaper (what PID 1
// is), leaves an orphan to it and checks that Reap takes the orphan but
// not the exit status of a child that os/exec still has to Wait for.
func TestReapKeepsOwnChildren(t *testing.T) {
	if !Supported() {
		t.Skip("by design: this kernel lacks pidfd (Linux ≥ 5.4)")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		testkit.Missing(t, "cannot become a subreaper (Linux ≥ 3.4 can): %v", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)

	// Our own child, exited with 7 and not yet waited for.
	own := exec.Command("sh", "-c", "exit 7")
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	// An orphan: the shell prints its background child's PID and exits.
	out, err := exec.Command("sh", "-c", "sleep 0.05 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(string(out[:len(out)-1]))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("orphan %d to be reaped", orphan), func() bool {
		Reap()
		return unix.Kill(orphan, 0) == unix.ESRCH
	})
	err = own.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Fatalf("own child: Wait = %v, want exit status 7", err)
	}
}

// TestAnyExited: a child that exited and was not waited for is seen, and
// stays for its Wait; with none left the pass lists nothing.
func TestAnyExited(t *testing.T) {
	if anyExited() {
		t.Fatal("an exited child before any was started")
	}
	c := exec.Command("sh", "-c", "exit 3")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the child to exit", anyExited)
	if !anyExited() {
		t.Fatal("asking took the child's exit")
	}
	err := c.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("Wait = %v, want exit status 3", err)
	}
	if anyExited() {
		t.Fatal("an exited child after its Wait")
	}
	if n := Reap(); n != 0 {
		t.Fatalf("Reap with no exited child reaped %d", n)
	}
}
