package oci

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/bench/benchpair"
	"github.com/moatsh/moat/internal/testkit"
)

// TestSealedRuntime: Pick runs crun from a copy nobody can write to, and
// crun, seeing it, starts once per run instead of copying itself and
// starting again (the control, crun's own file, starts twice).
func TestSealedRuntime(t *testing.T) {
	testkit.RequireRoot(t)
	testkit.RequireTool(t, "crun")
	strace := testkit.RequireTool(t, "strace")
	o, err := Pick(context.Background(), slog.New(slog.DiscardHandler), "crun", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if o.sealed == nil || !strings.HasPrefix(o.bin, "/proc/self/fd/") {
		t.Fatalf("crun runs from %s, not a sealed copy", o.bin)
	}
	if seals, err := unix.FcntlInt(o.sealed.Fd(), unix.F_GET_SEALS, 0); err != nil || seals != runtimeSeals {
		t.Fatalf("seals %#x (%v), want %#x", seals, err, runtimeSeals)
	}
	if w, err := os.OpenFile(o.bin, os.O_WRONLY, 0); err == nil {
		_, err = w.Write([]byte("#!/bin/sh\n"))
		w.Close()
		if err == nil {
			t.Fatal("wrote to the sealed copy")
		}
	}
	if out, err := o.Run(context.Background(), "list"); err != nil {
		t.Fatalf("crun list from the sealed copy: %v: %s", err, out)
	}
	plain, err := exec.LookPath("crun")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		bin  *os.File
		want int
	}{
		{"sealed copy", o.sealed, 1},
		{"crun's own file", nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := execsOf(t, strace, plain, tc.bin); got != tc.want {
				t.Errorf("crun list started %d times, want %d", got, tc.want)
			}
		})
	}
}

// execsOf counts the execs of one `crun list`, of bin (given to strace as
// descriptor 3) or, when nil, of plain.
func execsOf(t *testing.T, strace, plain string, bin *os.File) int {
	t.Helper()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace")
	run := plain
	cmd := exec.Command(strace, "-f", "-qq", "-e", "trace=execve,execveat", "-o", trace)
	if bin != nil {
		cmd.ExtraFiles, run = []*os.File{bin}, "/proc/self/fd/3"
	}
	cmd.Args = append(cmd.Args, run, "--root", filepath.Join(dir, "state"), "list")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if (strings.Contains(l, "execve(") || strings.Contains(l, "execveat(")) && strings.Contains(l, "= 0") {
			n++
		}
	}
	if n == 0 {
		t.Fatal(errors.New("no exec traced: " + string(b)))
	}
	return n
}

// BenchmarkSealedRuntime runs `crun list` from crun's own file and from
// the sealed copy in turn and reports the medians of each run's CPU time
// (user + system, crun and the copy it makes of itself) and their ratio.
func BenchmarkSealedRuntime(b *testing.B) {
	testkit.RequireRoot(b)
	o, err := Pick(context.Background(), slog.New(slog.DiscardHandler), "crun", b.TempDir())
	if err != nil || o.sealed == nil {
		b.Fatalf("no sealed copy: %v", err)
	}
	plain := &CLI{Name: "crun", bin: testkit.RequireTool(b, "crun"), Root: o.Root}
	cpu := func(c *CLI) time.Duration {
		cmd := c.Command(context.Background(), "list")
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	benchpair.Compare(b, "crun list, CPU",
		benchpair.Way{Name: "sealed-copy", Run: func() time.Duration { return cpu(o) }},
		benchpair.Way{Name: "own-file", Run: func() time.Duration { return cpu(plain) }})
}

// Should the kernel refuse to run the sealed copy, the command runs from
// the binary's own file instead, and the refusal is logged with what the
// descriptor held.
func TestSealedRefusedFallsBack(t *testing.T) {
	testkit.RequireRoot(t)
	crun := testkit.RequireTool(t, "crun")
	notExec, err := os.Open("/etc/hostname") // a descriptor exec refuses (EACCES)
	if err != nil {
		t.Fatal(err)
	}
	defer notExec.Close()
	var logged bytes.Buffer
	o := &CLI{Name: "crun", bin: sealedPath(notExec), sealed: notExec, own: crun, Root: t.TempDir(),
		log: slog.New(slog.NewTextHandler(&logged, nil))}
	out, err := o.Run(context.Background(), "--version")
	if err != nil || !strings.Contains(string(out), "crun") {
		t.Fatalf("crun --version: %q, %v", out, err)
	}
	if !strings.Contains(logged.String(), "sealed copy could not be run") || !strings.Contains(logged.String(), "/etc/hostname") {
		t.Errorf("refusal not logged with the descriptor's target:\n%s", logged.String())
	}
	o.own = ""
	if _, err := o.Run(context.Background(), "--version"); err == nil {
		t.Error("ran without a file to fall back to")
	}
}
