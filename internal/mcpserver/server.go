// Package mcpserver is Moat's MCP server (`moat mcp`): it lets an AI
// agent (Claude Desktop, Cursor, any Model Context Protocol client) create
// sandboxes, run commands and code in them, move files and reach their
// ports, through the tools of the official MCP Go SDK. It exists so that
// agents need neither an E2B SDK nor a shell: the server is a client of a
// Moat server holding one API key, so it reaches only that key's team's
// sandboxes (the Moat server enforces it).
//
// Every tool call is bounded in time (Config.CallTimeout) and in the size
// of what it returns (Config.MaxOutput, truncated with a note); a failure
// is a tool result with IsError and the reason, never a protocol error or
// a panic.
package mcpserver

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	moat "github.com/moatsh/moat/sdk/go"
)

// Defaults for Config's zero fields.
const (
	DefaultCallTimeout = 5 * time.Minute
	DefaultRunTimeout  = 60 * time.Second
	DefaultMaxOutput   = 64 << 10
	// maxWrite bounds write_file's content (the streamable HTTP transport
	// refuses bodies over 4 MiB anyway).
	maxWrite = 4 << 20
	// maxImages bounds the PNG data of one run_code result.
	maxImages = 4 << 20
)

// Config configures the MCP server.
type Config struct {
	Client *moat.Client // required: the Moat server and its API key
	// Domain is the Moat server's --domain: expose_port returns
	// http(s)://{port}-{id}.{Domain} when it is set.
	Domain string
	// CallTimeout bounds every tool call (0 = DefaultCallTimeout).
	CallTimeout time.Duration
	// MaxOutput bounds each text a tool returns, in bytes (0 =
	// DefaultMaxOutput); longer output is truncated with a note.
	MaxOutput int
	// Version is reported to clients as the server's version.
	Version string
	Logger  *slog.Logger // nil = slog.Default()
}

// server holds the configuration the tool handlers share.
type server struct {
	cfg Config
	log *slog.Logger
}

// New returns the MCP server with Moat's tools.
func New(cfg Config) (*mcp.Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("mcpserver: Config.Client is required")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &server{cfg: cfg, log: cfg.Logger}
	ms := mcp.NewServer(&mcp.Implementation{Name: "moat", Title: "Moat sandboxes", Version: cfg.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: cfg.Logger})
	s.addSandboxTools(ms)
	s.addExecTools(ms)
	s.addFileTools(ms)
	return ms, nil
}

const instructions = `Moat runs code in disposable, isolated sandboxes (E2B-compatible).
Create one with create_sandbox (template "code-interpreter-v1" for run_code), then use its sandbox_id with
run_command, run_code, read_file, write_file, list_files and expose_port. Kill it with kill_sandbox when done;
otherwise it is killed when its timeout expires.`

// ServeStdio serves one client on stdin/stdout until it disconnects or ctx
// ends.
func ServeStdio(ctx context.Context, ms *mcp.Server) error {
	if err := ms.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		return fmt.Errorf("mcp over stdio: %w", err)
	}
	return nil
}

// HTTPHandler serves the streamable HTTP transport. A non-empty token is
// required as "Authorization: Bearer <token>" on every request.
func HTTPHandler(ms *mcp.Server, token string, log *slog.Logger) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms },
		&mcp.StreamableHTTPOptions{Logger: log, SessionTimeout: 30 * time.Minute})
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// handler is a typed tool handler without the request.
type handler[In, Out any] func(ctx context.Context, in In) (*mcp.CallToolResult, Out, error)

// addTool registers h under t, bounded by the call timeout, with errors
// and panics turned into IsError results.
func addTool[In, Out any](s *server, ms *mcp.Server, t *mcp.Tool, h handler[In, Out]) {
	mcp.AddTool(ms, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (res *mcp.CallToolResult, out Out, err error) {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
		start := time.Now()
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("mcp tool panicked", "tool", t.Name, "panic", p, "stack", string(debug.Stack()))
				var zero Out
				res, out, err = nil, zero, fmt.Errorf("%s: internal error: %v", t.Name, p)
			}
			if err != nil && ctx.Err() == context.DeadlineExceeded {
				err = fmt.Errorf("%w (the call exceeded its limit of %s)", err, s.cfg.CallTimeout)
			}
			s.log.Debug("mcp tool call", "tool", t.Name, "took", time.Since(start), "err", err)
		}()
		return h(ctx, in)
	})
}

// truncate cuts s to at most max bytes (on a rune boundary) and says so.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && cut < len(s) && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n[truncated: %d of %d bytes shown]", cut, len(s))
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// text is a text content.
func text(format string, args ...any) *mcp.TextContent {
	return &mcp.TextContent{Text: fmt.Sprintf(format, args...)}
}

// textResult is a result with one text content.
func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// errorResult is an IsError result with the text s (for failures that
// still carry output, such as a timed-out command's).
func errorResult(s string) *mcp.CallToolResult {
	r := textResult(s)
	r.IsError = true
	return r
}

// joinNonEmpty joins the non-empty parts with blank lines.
func joinNonEmpty(parts ...string) string {
	var keep []string
	for _, p := range parts {
		if p != "" {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, "\n\n")
}

// boundedTimeout is d, or def when d is 0, at most the call timeout.
func (s *server) boundedTimeout(seconds float64, def time.Duration) time.Duration {
	d := time.Duration(seconds * float64(time.Second))
	if d <= 0 {
		d = def
	}
	return min(d, s.cfg.CallTimeout)
}
