package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moatsh/moat/internal/mcpserver"
	"github.com/moatsh/moat/internal/testkit"
	moat "github.com/moatsh/moat/sdk/go"
)

// TestMCP drives `moat mcp`'s tools with the MCP Go SDK's client against a
// real `moat serve` (scope 4): over an in-memory transport, over streamable
// HTTP and over stdio (the moat binary).
func TestMCP(t *testing.T) {
	e := startMCPEnv(t)
	cs := e.session(t, e.srv.client(), mcpserver.Config{MaxOutput: 4096, CallTimeout: 90 * time.Second})

	t.Run("tools", func(t *testing.T) { checkTools(t, cs) })
	id := e.create(t, cs, "base")
	t.Run("run_command", func(t *testing.T) { testRunCommand(t, cs, id) })
	t.Run("files", func(t *testing.T) { testFiles(t, cs, id) })
	t.Run("expose_port", func(t *testing.T) { testExposePort(t, e, id) })
	t.Run("run_code", func(t *testing.T) { testRunCode(t, e, cs) })
	t.Run("teams", func(t *testing.T) { testTeams(t, e, id) })
	t.Run("http", func(t *testing.T) { testHTTP(t, e, id) })
	t.Run("stdio", func(t *testing.T) { testStdio(t, e, id) })
	t.Run("kill", func(t *testing.T) {
		mustCall(t, cs, "kill_sandbox", map[string]any{"sandbox_id": id})
		var list struct {
			Sandboxes []struct {
				SandboxID string `json:"sandbox_id"`
			} `json:"sandboxes"`
		}
		structured(t, mustCall(t, cs, "list_sandboxes", nil), &list)
		for _, s := range list.Sandboxes {
			if s.SandboxID == id {
				t.Errorf("list_sandboxes still lists %s after kill_sandbox", id)
			}
		}
		wantError(t, cs, "run_command", map[string]any{"sandbox_id": id, "command": "true"}, "doesn't exist")
		wantError(t, cs, "kill_sandbox", map[string]any{"sandbox_id": id}, "doesn't exist")
	})
}

func checkTools(t *testing.T, cs *mcp.ClientSession) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != strings.Join(mcpTools, ",") {
		t.Errorf("tools = %v, want %v", names, mcpTools)
	}
}

func testRunCommand(t *testing.T, cs *mcp.ClientSession, id string) {
	res := mustCall(t, cs, "run_command", map[string]any{"sandbox_id": id,
		"command": "echo hello; echo oops >&2; echo $GREETING; pwd; exit 3", "envs": map[string]string{"GREETING": "hi"}, "cwd": "/tmp"})
	var out struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	structured(t, res, &out)
	if out.ExitCode != 3 || out.Stdout != "hello\nhi\n/tmp\n" || out.Stderr != "oops\n" {
		t.Errorf("run_command = %+v, want exit 3, stdout hello/hi//tmp, stderr oops", out)
	}
	// Output beyond MaxOutput (4096) is cut with a note.
	res = mustCall(t, cs, "run_command", map[string]any{"sandbox_id": id, "command": "head -c 100000 /dev/zero | tr '\\0' a"})
	structured(t, res, &out)
	if !strings.HasPrefix(out.Stdout, strings.Repeat("a", 4096)+"\n[truncated: 4096 of 100000 bytes shown]") {
		t.Errorf("100000 bytes of output: stdout %d bytes, ends %q", len(out.Stdout), out.Stdout[max(0, len(out.Stdout)-60):])
	}
	// The timeout kills the command; the output so far comes back.
	start := time.Now()
	res = call(t, cs, "run_command", map[string]any{"sandbox_id": id, "command": "echo started; sleep 60", "timeout_seconds": 2})
	if took := time.Since(start); !res.IsError || !strings.Contains(toolText(res), "timed out") ||
		!strings.Contains(toolText(res), "started") || took > 30*time.Second {
		t.Errorf("sleep 60 with a 2 s timeout: error %v after %s: %q", res.IsError, took, toolText(res))
	}
	wantError(t, cs, "run_command", map[string]any{"sandbox_id": id, "command": " "}, "command is required")
	wantError(t, cs, "run_command", map[string]any{"sandbox_id": "nosuchsandbox", "command": "true"}, "doesn't exist")
	wantError(t, cs, "run_command", map[string]any{"sandbox_id": "../x", "command": "true"}, "not a sandbox ID")
}

func testFiles(t *testing.T, cs *mcp.ClientSession, id string) {
	mustCall(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "/tmp/mcp/dir/hello.txt", "content": "héllo\nworld\n"})
	if got := toolText(mustCall(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/tmp/mcp/dir/hello.txt"})); got != "héllo\nworld\n\n" {
		t.Errorf("read_file = %q", got)
	}
	// Binary content in base64; a PNG comes back as an image.
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	mustCall(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "/tmp/mcp/x.png", "encoding": "base64",
		"content": "iVBORw0KGgoAAAANSUhEUg=="})
	res := mustCall(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/tmp/mcp/x.png"})
	if len(res.Content) != 2 {
		t.Fatalf("read_file of a PNG: %d contents, want text and image", len(res.Content))
	}
	if img, ok := res.Content[1].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || !bytes.Equal(img.Data, png) {
		t.Errorf("read_file of a PNG: %#v", res.Content[1])
	}
	// A large file is truncated (MaxOutput 4096).
	mustCall(t, cs, "run_command", map[string]any{"sandbox_id": id, "command": "seq 1 100000 > /tmp/mcp/big.txt"})
	if got := toolText(mustCall(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/tmp/mcp/big.txt"})); !strings.HasPrefix(got, "1\n2\n3\n") ||
		!strings.Contains(got, "[truncated: 4096 of 588895 bytes shown]") {
		t.Errorf("read_file of 588895 bytes: %d bytes, ends %q", len(got), got[max(0, len(got)-80):])
	}
	var list struct {
		Entries []struct{ Name, Path, Type string }
	}
	structured(t, mustCall(t, cs, "list_files", map[string]any{"sandbox_id": id, "path": "/tmp/mcp", "depth": 2}), &list)
	var got []string
	for _, e := range list.Entries {
		got = append(got, e.Path+":"+e.Type)
	}
	want := "/tmp/mcp/big.txt:file,/tmp/mcp/dir:dir,/tmp/mcp/dir/hello.txt:file,/tmp/mcp/x.png:file"
	if strings.Join(got, ",") != want {
		t.Errorf("list_files = %v, want %s", got, want)
	}
	wantError(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/tmp/mcp/none"}, "404")
	wantError(t, cs, "list_files", map[string]any{"sandbox_id": id, "path": "/tmp/mcp/none"}, "not")
	wantError(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "/tmp/x", "content": "%%", "encoding": "base64"}, "not base64")
}

func testExposePort(t *testing.T, e *mcpEnv, id string) {
	cs := e.session(t, e.srv.client(), mcpserver.Config{Domain: "sandbox.test"})
	mustCall(t, cs, "run_command", map[string]any{"sandbox_id": id,
		"command": "cd /tmp && nohup python3 -m http.server 8000 >/dev/null 2>&1 &"})
	var out struct {
		URL      string            `json:"url"`
		ProxyURL string            `json:"proxy_url"`
		Probe    string            `json:"probe"`
		Headers  map[string]string `json:"headers"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		structured(t, mustCall(t, cs, "expose_port", map[string]any{"sandbox_id": id, "port": 8000}), &out)
		if strings.HasPrefix(out.Probe, "HTTP 200") || time.Now().After(deadline) {
			break
		}
	}
	if out.URL != "http://8000-"+id+".sandbox.test" || out.ProxyURL != e.srv.base ||
		out.Headers["E2b-Sandbox-Id"] != id || out.Headers["E2b-Sandbox-Port"] != "8000" || !strings.HasPrefix(out.Probe, "HTTP 200") {
		t.Errorf("expose_port = %+v", out)
	}
	wantError(t, cs, "expose_port", map[string]any{"sandbox_id": id, "port": 70000}, "want 1 to 65535")
}

func testRunCode(t *testing.T, e *mcpEnv, cs *mcp.ClientSession) {
	if !e.interpreter {
		testkit.Missing(t, "no code-interpreter-v1 template on this host (moat template build code-interpreter-v1)")
	}
	id := e.create(t, cs, "code-interpreter-v1")
	res := mustCall(t, cs, "run_code", map[string]any{"sandbox_id": id, "code": "x = 6\nprint('side', flush=True)\nx * 7"})
	if got := toolText(res); !strings.Contains(got, "Result:\n42") || !strings.Contains(got, "stdout:\nside\n") {
		t.Errorf("run_code = %q, want result 42 and stdout side", got)
	}
	// State persists; an exception is a tool error with its traceback.
	res = call(t, cs, "run_code", map[string]any{"sandbox_id": id, "code": "x / 0"})
	if got := toolText(res); !res.IsError || !strings.Contains(got, "ZeroDivisionError") {
		t.Errorf("x / 0: error %v %q", res.IsError, got)
	}
	res = mustCall(t, cs, "run_code", map[string]any{"sandbox_id": id,
		"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [x, 2, 3])\nplt.show()"})
	var pngs int
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok && img.MIMEType == "image/png" && bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
			pngs++
		}
	}
	if pngs != 1 {
		t.Errorf("matplotlib chart: %d PNG images, want 1: %q", pngs, toolText(res))
	}
	res = mustCall(t, cs, "run_code", map[string]any{"sandbox_id": id, "language": "bash", "code": "echo from bash"})
	if !strings.Contains(toolText(res), "from bash") {
		t.Errorf("bash: %q", toolText(res))
	}
	start := time.Now()
	res = call(t, cs, "run_code", map[string]any{"sandbox_id": id, "code": "import time\nprint('before', flush=True)\ntime.sleep(60)", "timeout_seconds": 3})
	if got := toolText(res); !res.IsError || !strings.Contains(got, "timed out") || time.Since(start) > 30*time.Second {
		t.Errorf("sleep 60 with a 3 s timeout: error %v after %s: %q", res.IsError, time.Since(start), got)
	}
	mustCall(t, cs, "kill_sandbox", map[string]any{"sandbox_id": id})
}

// testTeams: a key of another team reaches none of this team's sandboxes.
func testTeams(t *testing.T, e *mcpEnv, id string) {
	key, err := createAPIKey(e.dataDir, "--team", "mcpother")
	if err != nil {
		t.Fatal(err)
	}
	other := e.session(t, &moat.Client{APIURL: e.srv.base, APIKey: key}, mcpserver.Config{})
	if got := toolText(mustCall(t, other, "list_sandboxes", nil)); strings.Contains(got, id) {
		t.Errorf("another team's list_sandboxes lists %s: %q", id, got)
	}
	wantError(t, other, "run_command", map[string]any{"sandbox_id": id, "command": "true"}, "doesn't exist")
	wantError(t, other, "read_file", map[string]any{"sandbox_id": id, "path": "/etc/hostname"}, "doesn't exist")
	wantError(t, other, "kill_sandbox", map[string]any{"sandbox_id": id}, "doesn't exist")
}

// testHTTP serves the streamable HTTP transport with a bearer token.
func testHTTP(t *testing.T, e *mcpEnv, id string) {
	ms, err := mcpserver.New(mcpserver.Config{Client: e.srv.client()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(mcpserver.HTTPHandler(ms, "secret", nil))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "moat-test", Version: "0"}, nil)
	if _, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, MaxRetries: -1}, nil); err == nil {
		t.Error("connected without the bearer token")
	}
	hc := *hs.Client()
	hc.Transport = bearer{token: "secret", rt: hs.Client().Transport}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	checkTools(t, cs)
	if got := toolText(mustCall(t, cs, "run_command", map[string]any{"sandbox_id": id, "command": "echo over http"})); !strings.Contains(got, "over http") {
		t.Errorf("run_command over HTTP: %q", got)
	}
}

// testStdio runs the moat binary's `moat mcp` over stdio.
func testStdio(t *testing.T, e *mcpEnv, id string) {
	cmd := exec.Command(moatBin, "mcp", "--api-url", e.srv.base, "--api-key", e.srv.key)
	var stderr lockedBuf
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "moat-test", Version: "0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("moat mcp: %v: %s", err, stderr.String())
	}
	checkTools(t, cs)
	res := mustCall(t, cs, "list_sandboxes", nil)
	if !strings.Contains(toolText(res), id) {
		t.Errorf("list_sandboxes over stdio does not list %s: %q", id, toolText(res))
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v: %s", err, stderr.String())
	}
	b, _ := json.Marshal(res.StructuredContent)
	t.Logf("list_sandboxes over stdio: %s", b)
}
