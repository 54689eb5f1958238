package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/testkit"
	moat "github.com/moatsh/moat/sdk/go"
)

// TestShellTmux drives `moat sandbox shell` as a person would, in a real
// terminal: tmux runs it, keys are sent, the screen is read. A command
// runs and shows its output, a resize of the window reaches the
// sandbox's terminal (stty size), and the shell's exit status is moat's.
func TestShellTmux(t *testing.T) {
	rootfs := requireRealServer(t)
	testkit.RequireTool(t, "tmux")
	s := startServer(t, newDataDir(t, rootfs))
	sb := s.createSandbox(t)
	// Refused before any terminal: a wrong key, an unknown sandbox.
	for _, c := range []struct{ id, key, want string }{
		{sb.ID, "e2b_" + strings.Repeat("0", 40), "Invalid API key"},
		{"nosuchsandbox0", s.key, "doesn't exist"},
	} {
		_, _, _, err := runCLI("sandbox", "shell", c.id, "--api-url", s.base, "--api-key", c.key)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("shell %s with key %.8s…: %v; want an error saying %q", c.id, c.key, err, c.want)
		}
	}
	dir := t.TempDir()
	sock := "moat-shell-test-" + sb.ID
	tmux := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("tmux", append([]string{"-L", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	code := filepath.Join(dir, "code")
	line := moatBin + " sandbox shell " + sb.ID + " --api-url " + s.base + " --api-key " + s.key + "; echo $? > " + code
	tmux("new-session", "-d", "-s", "shell", "-x", "80", "-y", "24", "sh", "-c", line)
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", sock, "kill-server").Run() })
	screen := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			out, err := exec.Command("tmux", "-L", sock, "capture-pane", "-p", "-t", "shell").CombinedOutput()
			if err == nil && strings.Contains(string(out), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the screen never showed %q:\n%s\n%s", want, out, s.out.String())
			}
		}
	}
	tmux("send-keys", "-t", "shell", "echo hi-$((6*7))", "Enter")
	screen("hi-42")
	tmux("resize-window", "-t", "shell", "-x", "100", "-y", "30")
	tmux("send-keys", "-t", "shell", "stty size", "Enter")
	screen("30 100")
	tmux("send-keys", "-t", "shell", "exit 3", "Enter")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if b, err := os.ReadFile(code); err == nil && strings.TrimSpace(string(b)) != "" {
			if got := strings.TrimSpace(string(b)); got != "3" {
				t.Fatalf("moat sandbox shell exited %s, want the shell's 3", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("moat sandbox shell did not exit after `exit 3`")
		}
	}
}

// TestSandboxJSON: `moat sandbox list --json` and `get --json` print the
// SDK's fields as JSON a program can read; get of an unknown sandbox is
// the server's not-found error.
func TestSandboxJSON(t *testing.T) {
	rootfs := requireRealServer(t)
	s := startServer(t, newDataDir(t, rootfs))
	sb := s.createSandbox(t)
	flags := []string{"--api-url", s.base, "--api-key", s.key}
	out, _, _, err := runCLI(append([]string{"sandbox", "list", "--json"}, flags...)...)
	var list []moat.SandboxInfo
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != sb.ID || list[0].State != "running" {
		t.Fatalf("list --json: %q %v", out, err)
	}
	if !strings.Contains(out, `"sandboxID": "`+sb.ID+`"`) {
		t.Errorf("list --json does not name sandboxID: %s", out)
	}
	out, _, _, err = runCLI(append([]string{"sandbox", "get", sb.ID, "--json"}, flags...)...)
	var info moat.SandboxInfo
	if err != nil || json.Unmarshal([]byte(out), &info) != nil || info.ID != sb.ID || info.MemoryMB == 0 {
		t.Fatalf("get --json: %q %v", out, err)
	}
	if out, _, _, err := runCLI(append([]string{"sandbox", "get", sb.ID}, flags...)...); err != nil || !strings.Contains(out, sb.ID) {
		t.Fatalf("get: %q %v", out, err)
	}
	if _, _, _, err := runCLI(append([]string{"sandbox", "get", "nosuchsandbox0", "--json"}, flags...)...); err == nil || !strings.Contains(err.Error(), "doesn't exist") {
		t.Fatalf("get of an unknown sandbox: %v", err)
	}
}

// TestSandboxLogsCLI: `moat sandbox logs` prints the sandbox's envd log
// (a command's "process started"), filters by level, prints JSON lines,
// and with -f prints what comes later until the sandbox is killed.
func TestSandboxLogsCLI(t *testing.T) {
	rootfs := requireRealServer(t)
	s := startServer(t, newDataDir(t, rootfs))
	sb := s.createSandbox(t)
	flags := []string{"--api-url", s.base, "--api-key", s.key}
	runIn(t, sb, "true")
	out, _, _, err := runCLI(append([]string{"sandbox", "logs", sb.ID}, flags...)...)
	if err != nil || !strings.Contains(out, "INFO  process started") || !strings.Contains(out, "pid=") {
		t.Fatalf("logs: %v\n%s", err, out)
	}
	if out, _, _, err := runCLI(append([]string{"sandbox", "logs", sb.ID, "--level", "error"}, flags...)...); err != nil || strings.Contains(out, "process started") {
		t.Fatalf("logs --level error: %v\n%s", err, out)
	}
	out, _, _, err = runCLI(append([]string{"sandbox", "logs", sb.ID, "--json", "--search", "process started"}, flags...)...)
	var e moat.LogEntry
	if err != nil || json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &e) != nil || e.Message != "process started" || e.Fields["pid"] == "" {
		t.Fatalf("logs --json: %v\n%s", err, out)
	}
	if _, _, _, err := runCLI(append([]string{"sandbox", "logs", "nosuchsandbox0"}, flags...)...); err == nil || !strings.Contains(err.Error(), "doesn't exist") {
		t.Fatalf("logs of an unknown sandbox: %v", err)
	}
	if _, _, _, err := runCLI(append([]string{"sandbox", "logs", sb.ID, "--level", "loud"}, flags...)...); err == nil || !strings.Contains(err.Error(), "level") {
		t.Fatalf("logs --level loud: %v", err)
	}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, _, _, err := runCLI(append([]string{"sandbox", "logs", sb.ID, "-f", "--search", "process started"}, flags...)...)
		done <- result{out, err}
	}()
	time.Sleep(1500 * time.Millisecond) // -f has printed what was there
	runIn(t, sb, "true")
	time.Sleep(1500 * time.Millisecond) // and polled again
	if err := sb.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || strings.Count(r.out, "process started") != 2 {
			t.Fatalf("logs -f: %v, want both commands' lines once each:\n%s", r.err, r.out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("logs -f did not end after the kill")
	}
}
