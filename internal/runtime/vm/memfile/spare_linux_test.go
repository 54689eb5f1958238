package memfile

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/testkit"
)

func TestSpares(t *testing.T) {
	testkit.RequireTool(t, "qemu-img")
	old := spareDelay
	spareDelay = 0
	defer func() { spareDelay = old }()
	root := t.TempDir()
	snap := Source{Dir: filepath.Join(root, "snap")}
	if err := os.MkdirAll(snap.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mem := bytes.Repeat([]byte("m"), 64<<10)
	if err := os.WriteFile(snap.mem(), mem, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", snap.disk(), "1M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	s := NewSpares(slog.Default(), filepath.Join(root, "vm"), 1)
	box := func(name string) string {
		d := filepath.Join(root, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if s.Take(snap, box("a")) {
		t.Fatal("took a spare before any was made")
	}
	waitSpares(t, s, snap, 1)
	dst := box("b")
	if !s.Take(snap, dst) {
		t.Fatal("no spare taken")
	}
	if got, err := os.ReadFile(filepath.Join(dst, "mem")); err != nil || !bytes.Equal(got, mem) {
		t.Fatalf("spare mem: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "disk.qcow2")); err != nil {
		t.Fatal(err)
	}
	// A snapshot rebuilt in place: its old spares must not be handed out.
	waitSpares(t, s, snap, 1)
	s.mu.Lock()
	stale := s.ready[snap.Dir][0].dir
	s.mu.Unlock()
	if err := os.WriteFile(snap.mem()+".new", []byte("other"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(snap.mem()+".new", snap.mem()); err != nil {
		t.Fatal(err)
	}
	if s.Take(snap, box("c")) {
		t.Fatal("a spare of the old snapshot was taken")
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale spare left: %v", err)
	}
	waitSpares(t, s, snap, 1)
	// An earlier process's spares go; this one's and those of another
	// instance in this process (alive) stay.
	other := filepath.Join(filepath.Dir(s.dir), "1-old")
	sibling := filepath.Join(filepath.Dir(s.dir), strconv.Itoa(os.Getpid())+"-sibling")
	for _, d := range []string{other, sibling} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RemoveOthers(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatal("other instance's spares left")
	}
	if _, err := os.Stat(sibling); err != nil {
		t.Fatalf("spares of another instance in this process: %v", err)
	}
	_ = os.RemoveAll(sibling)
	if _, err := os.Stat(s.dir); err != nil {
		t.Fatal(err)
	}
	// Close ends a refill still waiting (a test's TempDir, a server's data
	// dir must not get files after it) and removes this instance's spares.
	spareDelay = time.Hour
	if !s.Take(snap, box("d")) {
		t.Fatal("no spare taken")
	}
	s.mu.Lock()
	busy := s.busy[snap.Dir]
	s.mu.Unlock()
	if !busy {
		t.Fatal("no refill started by the take")
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the refill's delay")
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("spares left after Close: %v", err)
	}
	if s.Take(snap, box("e")) {
		t.Fatal("a spare handed out after Close")
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("a refill ran after Close: %v", err)
	}
}

// waitSpares waits until snap has n spares and no refill runs.
func waitSpares(t *testing.T, s *Spares, snap Source, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.mu.Lock()
		got, busy := len(s.ready[snap.Dir]), s.busy[snap.Dir]
		s.mu.Unlock()
		if got == n && !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("spares: have %d (refilling %v), want %d", got, busy, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
