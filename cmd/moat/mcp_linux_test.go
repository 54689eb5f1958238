package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moatsh/moat/internal/mcpserver"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
	moat "github.com/moatsh/moat/sdk/go"
)

// mcpTools are the tools `moat mcp` offers.
var mcpTools = []string{"create_sandbox", "expose_port", "kill_sandbox", "list_files", "list_sandboxes",
	"read_file", "run_code", "run_command", "write_file"}

// mcpEnv is a real `moat serve` (in scope 4, beside the host scope's
// servers) and MCP client sessions with its API key.
type mcpEnv struct {
	srv     *realServer
	dataDir string
	// interpreter: the code-interpreter-v1 template is available.
	interpreter bool
	mu          sync.Mutex
	created     []string // sandboxes the tests made through MCP, killed at cleanup
}

// startMCPEnv starts the server; the code-interpreter-v1 template is known
// to its store when the host has it built (run_code needs it).
func startMCPEnv(t *testing.T) *mcpEnv {
	t.Helper()
	rootfs := requireRealServer(t)
	dataDir := newDataDir(t, rootfs)
	ci := filepath.Join(testkit.DataDir(), "templates", "code-interpreter-v1", "rootfs")
	_, err := os.Stat(filepath.Join(ci, "usr/local/bin/envd"))
	interpreter := err == nil
	if interpreter {
		db, err := store.Open(context.Background(), filepath.Join(dataDir, "moat.db"))
		if err != nil {
			t.Fatal(err)
		}
		err = db.UpsertTemplate(context.Background(), store.Template{Name: "code-interpreter-v1", RootfsDir: ci})
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	srv, err := tryStart(t, dataDir, []string{"--scope", "4"})
	if err != nil {
		t.Fatal(err)
	}
	e := &mcpEnv{srv: srv, dataDir: dataDir, interpreter: interpreter}
	// Registered after the server's stop, so it runs before it.
	t.Cleanup(func() { e.killAll(t) })
	return e
}

// killAll kills every sandbox the tests created and then every sandbox
// the server still lists, failing the test if one cannot be killed.
func (e *mcpEnv) killAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := e.srv.client()
	e.mu.Lock()
	ids := append([]string(nil), e.created...)
	e.mu.Unlock()
	if list, err := c.ListSandboxes(ctx); err == nil {
		for _, s := range list {
			ids = append(ids, s.ID)
		}
	}
	for _, id := range ids {
		if err := c.Kill(ctx, id); err != nil && !errors.Is(err, moat.ErrNotFound) {
			t.Errorf("kill %s at cleanup: %v", id, err)
		}
	}
}

// session connects an in-process MCP server with the client's key over an
// in-memory transport.
func (e *mcpEnv) session(t *testing.T, c *moat.Client, cfg mcpserver.Config) *mcp.ClientSession {
	t.Helper()
	cfg.Client = c
	ms, err := mcpserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := ms.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "moat-test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Close() })
	return cs
}

// toolText is the text of a result's text contents.
func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
			b.WriteString("\n")
		}
	}
	return b.String()
}

// call calls a tool within two minutes; a protocol error fails the test.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	return res
}

// mustCall is call that also fails the test on a tool error.
func mustCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res := call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s(%v): tool error: %s", name, args, toolText(res))
	}
	return res
}

// wantError calls a tool and wants a tool error whose text has want.
func wantError(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want string) {
	t.Helper()
	res := call(t, cs, name, args)
	if !res.IsError || !strings.Contains(strings.ToLower(toolText(res)), strings.ToLower(want)) {
		t.Errorf("%s(%v) = error %v %q, want a tool error with %q", name, args, res.IsError, toolText(res), want)
	}
}

// structured decodes a result's structured content into v.
func structured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

// create makes a sandbox through MCP and remembers it for the cleanup.
func (e *mcpEnv) create(t *testing.T, cs *mcp.ClientSession, template string) string {
	t.Helper()
	res := mustCall(t, cs, "create_sandbox", map[string]any{"template": template, "timeout_seconds": 600})
	var out struct {
		SandboxID string `json:"sandbox_id"`
	}
	structured(t, res, &out)
	if out.SandboxID == "" {
		t.Fatalf("create_sandbox: no sandbox_id in %s", toolText(res))
	}
	e.mu.Lock()
	e.created = append(e.created, out.SandboxID)
	e.mu.Unlock()
	return out.SandboxID
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}
