package cloexec

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMarkInherited re-runs the test binary with an inherited pipe and
// file as fds 3 and 4; the child marks them and execs `ls /proc/self/fd`,
// which must see neither.
func TestMarkInherited(t *testing.T) {
	if os.Getenv("CLOEXEC_CHILD") == "1" {
		if err := MarkInherited(); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("ls", "/proc/self/fd").Output()
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("FDS " + strings.Join(strings.Fields(string(out)), ",") + "\n")
		return
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	f, err := os.CreateTemp(t.TempDir(), "inherited")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMarkInherited$")
	cmd.Env = append(os.Environ(), "CLOEXEC_CHILD=1")
	cmd.ExtraFiles = []*os.File{pw, f}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if fds, ok := strings.CutPrefix(line, "FDS "); ok {
			for _, fd := range strings.Split(fds, ",") {
				if fd != "0" && fd != "1" && fd != "2" && fd != "3" { // 3: ls's own directory
					t.Errorf("grandchild holds fd %s (all: %s)", fd, fds)
				}
			}
			return
		}
	}
	t.Fatalf("no FDS line: %s", out)
}

func TestMarkEach(t *testing.T) {
	if err := markEach(); err != nil {
		t.Fatal(err)
	}
}
