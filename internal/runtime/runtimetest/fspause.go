package runtimetest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/dialrace"
	"github.com/moatsh/moat/internal/envd/runcmd"
	"github.com/moatsh/moat/internal/runtime"
)

// testPauseFilesystem: a filesystem-only pause ends the sandbox's
// processes (its init's PID is gone) and keeps its files; a Recover while
// it is paused adopts it as paused; Resume boots it again from its files
// (a file written before the pause reads back through envd), and a pause
// with the memory after that works as for any sandbox.
func testPauseFilesystem(t *testing.T, h Harness) {
	p, ok := h.Runtime.(runtime.FilesystemPauser)
	if !ok {
		t.Skipf("by design: %s has no filesystem-only pause (runtime.FilesystemPauser); the API refuses memory: false with 501", h.Runtime.Name())
	}
	hd := create(t, h)
	ctx := ctxT(t)
	const path, content = "/tmp/kept-by-the-pause", "written before a filesystem-only pause"
	if h.Envd {
		if err := envdRetry(ctx, func() error { return envdFile(ctx, hd, http.MethodPost, path, content) }); err != nil {
			t.Fatalf("write through envd: %v", err)
		}
	}
	if h.Envd { // as the orchestrator does: the guest's page cache is not its disk
		if err := envdSync(ctx, hd); err != nil {
			t.Fatalf("sync through envd: %v", err)
		}
	}
	if err := p.PauseFilesystem(ctx, hd.ID); err != nil {
		t.Fatalf("filesystem-only pause: %v", err)
	}
	if hd.PID > 0 && alive(hd.PID) {
		t.Errorf("the sandbox's init (pid %d) still runs after a filesystem-only pause", hd.PID)
	}
	if running(hd.ID, h) {
		t.Error("Wait says the sandbox runs after a filesystem-only pause")
	}
	hs, err := h.Runtime.Recover(ctx, []string{hd.ID})
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if len(hs) != 1 || hs[0].ID != hd.ID || !hs[0].Paused {
		t.Fatalf("recover of a filesystem-paused sandbox: %+v, want it adopted as paused", hs)
	}
	nh, err := h.Runtime.Resume(ctx, hd.ID)
	if err != nil || nh == nil || nh.Paused {
		t.Fatalf("resume: %+v %v", nh, err)
	}
	if !running(hd.ID, h) {
		t.Fatal("not running after resume")
	}
	ready(t, h, nh)
	if nh.PID > 0 && nh.PID == hd.PID {
		t.Errorf("resume kept pid %d: the processes were not restarted", nh.PID)
	}
	readBack(t, h, nh, path, content)
	// The booted sandbox pauses with its memory like any other.
	if err := h.Runtime.Pause(ctx, hd.ID); err != nil {
		t.Fatalf("pause after the filesystem resume: %v", err)
	}
	if nh, err = h.Runtime.Resume(ctx, hd.ID); err != nil {
		t.Fatalf("resume of that pause: %v", err)
	}
	readBack(t, h, nh, path, content)
}

// envdClient reaches sandboxes' envd as the server does: dials race, no
// pooled connections.
var envdClient = &http.Client{Transport: dialrace.NewTransport()}

// readBack checks that path in the sandbox at hd holds content.
func readBack(t *testing.T, h Harness, hd *runtime.Handle, path, content string) {
	t.Helper()
	if !h.Envd {
		return
	}
	ctx, got := ctxT(t), ""
	err := envdRetry(ctx, func() (err error) { got, err = envdRead(ctx, hd, path); return err })
	if err != nil || got != content {
		t.Fatalf("file after resume: %q, %v; want %q", got, err, content)
	}
}

// alive reports whether pid exists and is not a zombie (an init that has
// ended and waits for whoever reaps it is gone for the sandbox).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, after, ok := strings.Cut(string(b), ") ")
	return ok && !strings.HasPrefix(after, "Z")
}

// envdSync runs sync(1) as root through envd.
func envdSync(ctx context.Context, h *runtime.Handle) error {
	pc := processconnect.NewProcessClient(envdClient, "http://"+net.JoinHostPort(h.Addr.String(), "49983"), connect.WithProtoJSON())
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	exit, err := runcmd.Run(ctx, pc, runcmd.Command{Argv: []string{"sync"}, User: "root"})
	if err == nil && (!exit.Exited || exit.Code != 0) {
		err = fmt.Errorf("sync ended: %s", exit.Status)
	}
	return err
}

// envdFile writes content to path (as root) through envd's /files.
func envdFile(ctx context.Context, h *runtime.Handle, method, path, content string) error {
	req, err := http.NewRequestWithContext(ctx, method, filesURL(h, path), strings.NewReader(content))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	return do(req, nil)
}

// envdRead reads path (as root) through envd's /files.
func envdRead(ctx context.Context, h *runtime.Handle, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, filesURL(h, path), nil)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = do(req, &b)
	return b.String(), err
}

func filesURL(h *runtime.Handle, path string) string {
	q := url.Values{"path": {path}, "username": {"root"}}
	return "http://" + net.JoinHostPort(h.Addr.String(), "49983") + "/files?" + q.Encode()
}

func do(req *http.Request, out io.Writer) error {
	resp, err := envdClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, b)
	}
	if out != nil {
		_, err = io.Copy(out, resp.Body)
	}
	return err
}

// envdRetry retries f for a few seconds: envd listens a moment before its
// HTTP server answers.
func envdRetry(ctx context.Context, f func() error) error {
	var err error
	for range 50 {
		if err = f(); err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}
