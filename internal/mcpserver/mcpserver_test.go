package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	moat "github.com/moatsh/moat/sdk/go"
)

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc\n[truncated: 3 of 4 bytes shown]"},
		{"aé", 2, "a\n[truncated: 1 of 3 bytes shown]"}, // é is 2 bytes: not cut in two
		{"", 0, ""},
	}
	for _, tt := range tests {
		if got := truncate(tt.in, tt.max); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

func TestCapped(t *testing.T) {
	tests := []struct {
		writes []string
		max    int
		want   string
	}{
		{[]string{"ab", "c"}, 5, "abc"},
		{[]string{"ab", "cd", "ef"}, 3, "abc\n[truncated: 3 of 6 bytes shown]"},
		{[]string{"a", "é"}, 2, "a\n[truncated: 1 of 3 bytes shown]"},
		{[]string{"xyz"}, 0, "\n[truncated: 0 of 3 bytes shown]"},
	}
	for _, tt := range tests {
		c := newCapped(tt.max)
		for _, w := range tt.writes {
			if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if got := c.String(); got != tt.want {
			t.Errorf("%q max %d = %q, want %q", tt.writes, tt.max, got, tt.want)
		}
	}
}

func TestCheckID(t *testing.T) {
	for id, ok := range map[string]bool{"i8huzar6x4p542pzhvox5": true, "": false, "../x": false, "a/b": false, "A": false} {
		if err := checkID(id); (err == nil) != ok {
			t.Errorf("checkID(%q) = %v, want ok %v", id, err, ok)
		}
	}
}

func TestBoundedTimeout(t *testing.T) {
	s := &server{cfg: Config{CallTimeout: time.Minute}}
	tests := []struct {
		seconds float64
		want    time.Duration
	}{
		{0, 10 * time.Second},
		{-1, 10 * time.Second},
		{1.5, 1500 * time.Millisecond},
		{3600, time.Minute},
	}
	for _, tt := range tests {
		if got := s.boundedTimeout(tt.seconds, 10*time.Second); got != tt.want {
			t.Errorf("boundedTimeout(%v) = %s, want %s", tt.seconds, got, tt.want)
		}
	}
}

func TestFileContent(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n")
	tests := []struct {
		name, path string
		data       []byte
		size       int64
		wantText   string
		wantImage  bool
	}{
		{"text", "/a.txt", []byte("hello"), 5, "hello", false},
		{"text cut", "/a.txt", []byte("hello world"), 100, "hello\n[truncated: 5 of 100 bytes shown]", false},
		{"image", "/a.PNG", png, 8, "/a.PNG: image/png, 8 bytes", true},
		{"image cut short is base64", "/a.png", png, 100, "/a.png: binary, 100 bytes; base64 of the first 3 bytes:\n" +
			base64.StdEncoding.EncodeToString(png[:3]), false},
		{"binary", "/a.bin", []byte{0, 1, 2}, 3, "/a.bin: binary, 3 bytes; base64:\nAAEC", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := fileContent(tt.path, tt.data, tt.size, 5)
			if got := res.Content[0].(*mcp.TextContent).Text; got != tt.wantText {
				t.Errorf("text = %q, want %q", got, tt.wantText)
			}
			if gotImage := len(res.Content) == 2; gotImage != tt.wantImage {
				t.Errorf("image = %v, want %v", gotImage, tt.wantImage)
			}
		})
	}
}

// TestExecute runs the interpreter client against a fake /execute.
func TestExecute(t *testing.T) {
	pngB64 := base64.StdEncoding.EncodeToString([]byte("\x89PNGdata"))
	tests := []struct {
		name      string
		status    int
		body      string
		wantErr   string // execute's error
		wantText  []string
		wantImage bool
		isError   bool
	}{
		{name: "result and streams", status: 200, body: `{"type": "stdout", "text": "a\n"}
{"type": "keepalive"}
{"type": "stderr", "text": "warn\n"}
{"type": "result", "text": "42", "is_main_result": true, "extra": {}}
{"type": "number_of_executions", "execution_count": 1}
{"type": "end_of_execution"}
`, wantText: []string{"Result:\n42", "stdout:\na\n", "stderr:\nwarn\n"}},
		{name: "chart", status: 200, body: `{"type": "result", "text": "<Figure>", "png": "` + pngB64 + `", "html": "<b>", "is_main_result": false}
{"type": "end_of_execution"}
`, wantText: []string{"Display:\n<Figure>", "(display also has: html)"}, wantImage: true},
		{name: "error", status: 200, body: `{"type": "error", "name": "ZeroDivisionError", "value": "division by zero", "traceback": "tb"}
{"type": "end_of_execution"}
`, wantText: []string{"ZeroDivisionError: division by zero\ntb"}, isError: true},
		{name: "cut stream", status: 200, body: `{"type": "stdout", "text": "a"}` + "\n",
			wantErr: "ended without end_of_execution", wantText: []string{"stdout:\na"}},
		{name: "bad language", status: 400, body: "Unsupported language: cobol", wantErr: "400 Bad Request: Unsupported language: cobol"},
		{name: "no interpreter", status: 502, body: `{"message": "port not open"}`, wantErr: "code-interpreter template"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got http.Header
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Header.Clone()
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			}))
			defer srv.Close()
			sb := &moat.Sandbox{ID: "sbx1", AccessToken: "tok"}
			ex, err := execute(context.Background(), srv.Client(), srv.URL, sb, executeRequest{Code: "x"}, 1000)
			if got.Get("E2b-Sandbox-Id") != "sbx1" || got.Get("E2b-Sandbox-Port") != "49999" || got.Get("X-Access-Token") != "tok" {
				t.Errorf("headers = %v", got)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !ex.started {
				return
			}
			res := ex.result(1000)
			txt := res.Content[0].(*mcp.TextContent).Text
			for _, w := range tt.wantText {
				if !strings.Contains(txt, w) {
					t.Errorf("text %q lacks %q", txt, w)
				}
			}
			if res.IsError != tt.isError {
				t.Errorf("IsError = %v, want %v", res.IsError, tt.isError)
			}
			var img *mcp.ImageContent
			if len(res.Content) > 1 {
				img, _ = res.Content[1].(*mcp.ImageContent)
			}
			if (img != nil) != tt.wantImage || img != nil && (img.MIMEType != "image/png" || !bytes.Equal(img.Data, []byte("\x89PNGdata"))) {
				t.Errorf("image = %+v, want %v", img, tt.wantImage)
			}
		})
	}
}

// TestToolErrors: bad arguments and an unreachable Moat server are tool
// errors (IsError with the reason), not protocol errors.
func TestToolErrors(t *testing.T) {
	ms, err := New(Config{Client: &moat.Client{APIURL: "http://127.0.0.1:1", APIKey: "k"}, CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := ms.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"list_sandboxes", nil, "connection refused"},
		{"create_sandbox", map[string]any{"timeout_seconds": -5}, "want 1 to 86400"},
		{"run_command", map[string]any{"sandbox_id": "abc"}, `missing properties: ["command"]`},
		{"run_command", map[string]any{"command": "true"}, "sandbox_id"},
		{"run_code", map[string]any{"sandbox_id": "abc", "code": "1"}, "connection refused"},
		{"write_file", map[string]any{"sandbox_id": "abc", "path": "/x", "content": "a", "encoding": "utf16"}, "want utf8 or base64"},
		{"list_files", map[string]any{"sandbox_id": "abc", "path": "/", "depth": 9}, "at most 5"},
		{"expose_port", map[string]any{"sandbox_id": "abc", "port": 0}, "want 1 to 65535"},
		{"kill_sandbox", map[string]any{"sandbox_id": "a b"}, "not a sandbox ID"},
	}
	for _, tt := range tests {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
		if err != nil {
			t.Errorf("%s: protocol error %v", tt.tool, err)
			continue
		}
		txt := ""
		if len(res.Content) > 0 {
			txt = res.Content[0].(*mcp.TextContent).Text
		}
		if !res.IsError || !strings.Contains(txt, tt.want) {
			t.Errorf("%s(%v) = error %v %q, want a tool error with %q", tt.tool, tt.args, res.IsError, txt, tt.want)
		}
	}
}
