package qemu

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/testkit"
)

// fakeConsole connects a console to a fake QEMU listening in a temporary
// directory, with a symlink to victim planted where the mirror goes.
func fakeConsole(t *testing.T) (con *Console, srv net.Conn, mirror, victim string) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "console.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	mirror, victim = filepath.Join(dir, "console.log"), filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, mirror); err != nil {
		t.Fatal(err)
	}
	con, err = DialConsole(context.Background(), sock, mirror, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	return con, <-accepted, mirror, victim
}

// TestConsoleSocket runs a console against a fake QEMU: markers split
// across writes are found, waits start from "now", the mirror file (which
// replaces a planted symlink without following it) and the ring stay
// under their caps, and a closed console fails waits at once.
func TestConsoleSocket(t *testing.T) {
	con, srv, mirror, victim := fakeConsole(t)
	ctx := context.Background()
	send := func(s string) {
		if _, err := srv.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	old := "old moat-marker\n" // before the watch: must not count
	send(old)
	testkit.WaitFor(t, 5*time.Second, "the console to read the old marker", func() bool {
		total, _ := con.Stats()
		return total >= int64(len(old))
	})
	w := con.Watch("moat-marker")
	go func() {
		send("noise moat-mar")
		time.Sleep(20 * time.Millisecond) // two writes: the marker is split across reads
		send("ker: done\n")
	}()
	if err := w.Wait(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Flood: 3 MiB in 4 KiB writes.
	chunk := bytes.Repeat([]byte("0123456789abcde\n"), 256)
	for i := 0; i < 3<<20/len(chunk); i++ {
		send(string(chunk))
	}
	last := con.Watch("the end")
	send("the end\n")
	if err := last.Wait(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	total, dropped := con.Stats()
	if total < 3<<20 || dropped != total-ConsoleRing {
		t.Errorf("total %d dropped %d (ring %d)", total, dropped, ConsoleRing)
	}
	if !strings.HasSuffix(con.Tail(100), "the end\n") {
		t.Errorf("tail %q", con.Tail(100))
	}
	for _, f := range []string{mirror, mirror + ".1"} {
		fi, err := os.Lstat(f)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > ConsoleFileCap {
			t.Errorf("%s: %v, %v (cap %d)", f, fi, err, ConsoleFileCap)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("mirror followed a symlink: victim now %q", b)
	}
	// QEMU quits: waits fail at once (for the closed console, not by
	// their timeout), with the tail quoted.
	srv.Close()
	<-con.done
	err := con.Watch("never").Wait(ctx, 5*time.Second)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "console closed") ||
		!strings.Contains(err.Error(), "the end") {
		t.Errorf("wait on a closed console: %v", err)
	}
	con.Close()
	var nilCon *Console
	if err := nilCon.Watch("x").Wait(ctx, time.Second); err == nil {
		t.Error("a nil console's wait succeeded")
	}
}

// TestSockRefRefusesSymlinks: a symlink planted where a socket belongs
// (a jailed QEMU can create entries in its directory) is not followed.
func TestSockRefRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "other.sock")
	ln, err := net.Listen("unix", real)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	link := filepath.Join(dir, "qmp.sock")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sockRef(link); err == nil {
		t.Error("sockRef followed a symlink")
	}
	plain := filepath.Join(dir, "file")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sockRef(plain); err == nil {
		t.Error("sockRef accepted a regular file")
	}
	ref, release, err := sockRef(real)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	c, err := net.Dial("unix", ref)
	if err != nil {
		t.Fatalf("dial through %s: %v", ref, err)
	}
	c.Close()
}

// TestOpenRootFile: the state file handed to QEMU must be root's own
// regular file, not a link or a file the jailed QEMU made.
func TestOpenRootFile(t *testing.T) {
	testkit.RequireRoot(t)
	dir := t.TempDir()
	own := filepath.Join(dir, "state")
	if err := os.WriteFile(own, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := openRootFile(own); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(own, link); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "foreign")
	if err := os.WriteFile(foreign, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(foreign, 1<<30, 1<<30); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, foreign, dir} {
		if f, err := openRootFile(p); err == nil {
			f.Close()
			t.Errorf("openRootFile(%s) succeeded", p)
		}
	}
}

// TestFollowFile: the console of a QEMU from an older version (a file)
// is followed from its end; earlier output does not count.
func TestFollowFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	if err := os.WriteFile(path, []byte("old moat-marker\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	con, err := FollowFile(path, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	ctx := context.Background()
	if err := con.Watch("moat-marker").Wait(ctx, 100*time.Millisecond); err == nil {
		t.Error("old output matched")
	}
	w := con.Watch("moat-marker")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, _ = f.WriteString("new moat-mar")
	time.Sleep(20 * time.Millisecond) // two writes: the marker is split across reads
	_, _ = f.WriteString("ker\n")
	if err := w.Wait(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}
