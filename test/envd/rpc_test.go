package envd_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/moatsh/moat/api/envd/filesystem"
	"github.com/moatsh/moat/api/envd/filesystem/filesystemconnect"
	procpb "github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/envd/envdtest"
	"github.com/moatsh/moat/internal/envd/state"
)

func TestRPCSmoke(t *testing.T) {
	e := envdtest.Start(t)
	e.Init(t, state.Init{AccessToken: ptr("tok")})
	auth := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
			r.Header().Set("X-Access-Token", "tok")
			return next(ctx, r)
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pc := processconnect.NewProcessClient(http.DefaultClient, e.URL, connect.WithProtoJSON())
	req := connect.NewRequest(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo hi"}}})
	req.Header().Set("X-Access-Token", "tok")
	stream, err := pc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var exited bool
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		if ev.GetEnd() != nil {
			exited = ev.GetEnd().GetExited()
		}
	}
	if err := stream.Err(); err != nil || !exited || out.String() != "hi\n" {
		t.Fatalf("Start: out %q exited %v err %v", out.String(), exited, err)
	}

	fc := filesystemconnect.NewFilesystemClient(http.DefaultClient, e.URL, connect.WithProtoJSON(), auth)
	entries(t, do(t, "POST", e.URL+"/files?path=listed.txt", map[string]string{
		"Content-Type": "application/octet-stream", "X-Access-Token": "tok"}, strings.NewReader("x")))
	resp, err := fc.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: e.Home, Depth: 1}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range resp.Msg.GetEntries() {
		found = found || en.GetName() == "listed.txt"
	}
	if !found {
		t.Fatalf("ListDir = %v", resp.Msg.GetEntries())
	}

	// Without the token the client sees unauthenticated.
	_, err = filesystemconnect.NewFilesystemClient(http.DefaultClient, e.URL, connect.WithProtoJSON()).
		ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: e.Home}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("ListDir without token: %v", err)
	}
}

func envelope(flag byte, n uint32, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = flag
	binary.BigEndian.PutUint32(b[1:], n)
	return append(b, payload...)
}

// connectOutcome reads a Connect streaming response and returns the error
// code it ends with ("" = success).
func connectOutcome(t *testing.T, status int, ctype string, body []byte) string {
	t.Helper()
	if status != 200 {
		var e struct{ Code string }
		if err := json.Unmarshal(body, &e); err != nil || e.Code == "" {
			t.Fatalf("non-200 (%d) without a Connect error: %q", status, body)
		}
		return e.Code
	}
	if ctype != "application/connect+json" {
		t.Fatalf("content type %q", ctype)
	}
	for len(body) >= 5 {
		flag, n := body[0], binary.BigEndian.Uint32(body[1:5])
		if int(n) > len(body)-5 {
			t.Fatalf("truncated response envelope")
		}
		msg := body[5 : 5+n]
		body = body[5+n:]
		if flag&2 != 0 {
			var end struct {
				Error *struct{ Code string } `json:"error"`
			}
			if err := json.Unmarshal(msg, &end); err != nil {
				t.Fatalf("end-stream %q: %v", msg, err)
			}
			if end.Error == nil {
				return ""
			}
			return end.Error.Code
		}
	}
	t.Fatalf("no end-stream envelope")
	return ""
}

func TestMalformedConnect(t *testing.T) {
	e := envdtest.Start(t)
	valid := []byte(`{"process":{"cmd":"/bin/true"}}`)
	big := bytes.Repeat([]byte(" "), 17<<20)
	tests := []struct {
		name  string
		ctype string
		body  []byte
		want  []string
	}{
		{"truncated prefix", "application/connect+json", []byte{0, 0, 0}, []string{"invalid_argument", "unknown", "internal"}},
		{"length beyond body", "application/connect+json", envelope(0, 1000, valid), []string{"invalid_argument", "unknown", "internal"}},
		{"invalid json", "application/connect+json", envelope(0, 5, []byte("{nope")), []string{"invalid_argument", "internal"}},
		{"compressed flag", "application/connect+json", envelope(1, uint32(len(valid)), valid), []string{"internal", "invalid_argument"}},
		{"huge declared length", "application/connect+json", envelope(0, 1<<31, valid), []string{"resource_exhausted"}},
		{"oversized message", "application/connect+json", envelope(0, uint32(len(big)), big), []string{"resource_exhausted"}},
		{"unary invalid json", "application/json", []byte("{nope"), []string{"invalid_argument", "internal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/process.Process/Start"
			if tt.ctype == "application/json" {
				path = "/filesystem.Filesystem/ListDir"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", e.URL+path, bytes.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.ctype)
			req.Header.Set("Connect-Protocol-Version", "1")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			code := connectOutcome(t, resp.StatusCode, resp.Header.Get("Content-Type"), body)
			for _, w := range tt.want {
				if code == w {
					return
				}
			}
			t.Fatalf("code %q, want one of %v (body %.200q)", code, tt.want, body)
		})
	}
	// envd still serves afterwards.
	if r := do(t, "GET", e.URL+"/health", nil, nil); r.Status != 204 {
		t.Fatalf("health after malformed requests = %d", r.Status)
	}
}
