package files

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
)

// TestComposeErrors walks every check of E2B's PostFilesCompose (status,
// JSON error body) and, for each refusal, that nothing was changed: the
// sources and an existing destination stay, no temporary file is left.
func TestComposeErrors(t *testing.T) {
	str := func(s string) *string { return &s }
	failChown := func(string, *users.User) error { return &os.PathError{Op: "lchown", Path: "x", Err: syscall.EPERM} }
	tests := []struct {
		name  string
		body  func(e *filesEnv) string // p0 and p1 exist; out.txt holds "old"
		token string                   // access token to set
		hdr   map[string]string
		chown ChownFunc
		code  int
		msg   string // the whole message, or its start when it ends in "*"
	}{
		{name: "empty body", body: raw(""), code: 400, msg: "invalid request body: EOF"},
		{name: "not JSON", body: raw("source_paths=p0"), code: 400, msg: "invalid request body: invalid character*"},
		{name: "truncated JSON", body: raw(`{"source_paths":["p0"`), code: 400, msg: "invalid request body: unexpected EOF"},
		{name: "wrong type", body: raw(`{"source_paths":"p0","destination":"d"}`), code: 400, msg: "invalid request body: json: cannot unmarshal*"},
		{name: "null", body: raw("null"), code: 400, msg: "source_paths must not be empty"},
		{name: "no sources", body: raw(`{"destination":"d"}`), code: 400, msg: "source_paths must not be empty"},
		{name: "empty sources", body: raw(`{"source_paths":[],"destination":"d"}`), code: 400, msg: "source_paths must not be empty"},
		{name: "no destination", body: raw(`{"source_paths":["p0"]}`), code: 400, msg: "destination is required"},
		{name: "empty destination", body: raw(`{"source_paths":["p0"],"destination":""}`), code: 400, msg: "destination is required"},
		{name: "unknown user", body: req([]string{"p0"}, "d", str("nosuchuser-moat")), code: 401, msg: "invalid username: 'nosuchuser-moat'"},
		{name: "empty username", body: req([]string{"p0"}, "d", str("")), code: 401, msg: "invalid username: ''"},
		{name: "other user's home", body: req([]string{"p0"}, "~root/d", nil), code: 400,
			msg: `error resolving destination path: path "~root/d": home directories of other users are not supported`},
		{name: "NUL in source", body: req([]string{"p0", "a\x00b"}, "d", nil), code: 400,
			msg: "error resolving source path \"a\\x00b\": path contains a NUL byte"},
		{name: "source too long", body: req([]string{strings.Repeat("a", 4097)}, "d", nil), code: 400, msg: "error resolving source path*"},
		{name: "source is destination", body: req([]string{"p0"}, "p0", nil), code: 400, msg: `source path "p0" cannot be the same as destination`},
		{name: "source is destination spelled otherwise", body: func(e *filesEnv) string {
			return req([]string{"p1", e.home + "/sub/../p0"}, "~/p0", nil)(e)
		}, code: 400, msg: `source path "*/sub/../p0" cannot be the same as destination`},
		{name: "missing source", body: req([]string{"nope"}, "d", nil), code: 404, msg: "source file not found: nope"},
		{name: "second source missing", body: req([]string{"p0", "nope"}, "out.txt", nil), code: 404, msg: "source file not found: nope"},
		{name: "source under a file", body: req([]string{"p0/x"}, "d", nil), code: 404, msg: "source file not found: p0/x"},
		{name: "source is a directory", body: req([]string{"p0", "dir"}, "d", nil), code: 400, msg: "source path is not a regular file: dir"},
		{name: "empty source is home", body: req([]string{""}, "d", nil), code: 400, msg: "source path is not a regular file: "},
		{name: "source is a fifo", body: req([]string{"fifo"}, "d", nil), code: 400, msg: "source path is not a regular file: fifo"},
		{name: "destination is a directory", body: req([]string{"p0", "p1"}, "dir", nil), code: 500, msg: "error finalizing compose: *"},
		{name: "destination under a file", body: req([]string{"p0"}, "file/d", nil), code: 500,
			msg: "error ensuring directories: parent '*/file' is not a directory"},
		{name: "chown fails", body: req([]string{"p0", "p1"}, "out.txt", nil), chown: failChown, code: 500,
			msg: "error changing file ownership: operation not permitted"},
		{name: "no token", body: req([]string{"p0"}, "d", nil), token: "tok", code: 401, msg: unauthorizedMsg},
		{name: "wrong token", body: req([]string{"p0"}, "d", nil), token: "tok", hdr: map[string]string{"X-Access-Token": "nope"},
			code: 401, msg: unauthorizedMsg},
		{name: "too large", body: raw(`{"source_paths":["` + strings.Repeat("a", maxComposeBody) + `"]}`), code: 400,
			msg: "invalid request body: http: request body too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFilesEnv(t, tt.chown)
			p0, p1, out := e.write(t, "p0", "zero"), e.write(t, "p1", "one"), e.write(t, "out.txt", "old")
			e.write(t, "file", "f")
			if err := os.Mkdir(filepath.Join(e.home, "dir"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(filepath.Join(e.home, "fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.token != "" {
				e.st.Apply(state.Init{AccessToken: &tt.token})
			}
			code, body := e.post(t, tt.body(e), tt.hdr)
			checkErrorBody(t, code, body, tt.code, tt.msg)
			for p, want := range map[string]string{p0: "zero", p1: "one", out: "old"} {
				if data, err := os.ReadFile(p); err != nil || string(data) != want {
					t.Errorf("%s = %q, %v after a refused compose", p, data, err)
				}
			}
			if exists(filepath.Join(e.home, "d")) {
				t.Error("a destination was created")
			}
			assertNoTemp(t, e.home)
		})
	}
}

func raw(body string) func(*filesEnv) string { return func(*filesEnv) string { return body } }

func req(sources []string, dest string, username *string) func(*filesEnv) string {
	return func(*filesEnv) string {
		m := map[string]any{"source_paths": sources, "destination": dest}
		if username != nil {
			m["username"] = *username
		}
		b, err := json.Marshal(m)
		if err != nil {
			panic(err)
		}
		return string(b)
	}
}

// checkErrorBody checks E2B's error answer: the status, a JSON body of
// exactly {"code": status, "message": msg}.
func checkErrorBody(t *testing.T, code int, body []byte, wantCode int, wantMsg string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("status %d, want %d: %s", code, wantCode, body)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil || len(got) != 2 {
		t.Fatalf("error body %q (%v)", body, err)
	}
	if c, _ := got["code"].(float64); int(c) != wantCode {
		t.Fatalf("code field %v, want %d", got["code"], wantCode)
	}
	msg, _ := got["message"].(string)
	if !matchMsg(msg, wantMsg) {
		t.Fatalf("message %q, want %q", msg, wantMsg)
	}
}

// matchMsg matches msg against want, where each "*" in want stands for
// any text.
func matchMsg(msg, want string) bool {
	parts := strings.Split(want, "*")
	if !strings.HasPrefix(msg, parts[0]) {
		return false
	}
	msg = msg[len(parts[0]):]
	for i, p := range parts[1:] {
		last := i == len(parts)-2
		j := strings.Index(msg, p)
		if last {
			return strings.HasSuffix(msg, p)
		}
		if j < 0 {
			return false
		}
		msg = msg[j+len(p):]
	}
	return msg == ""
}

// TestComposeOwnership composes as another account (root only): the result
// and the directories created for it belong to that account, as in E2B.
func TestComposeOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no nobody account")
	}
	e := newFilesEnv(t, nil)
	src := e.write(t, "p0", "mine")
	dest := filepath.Join(e.home, "made", "for", "nobody.txt")
	code, body := e.post(t, req([]string{src}, dest, ptr("nobody"))(e), nil)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	for _, p := range []string{dest, filepath.Dir(dest), filepath.Join(e.home, "made")} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if strconv.Itoa(int(st.Uid)) != nobody.Uid || strconv.Itoa(int(st.Gid)) != nobody.Gid {
			t.Errorf("%s belongs to %d:%d, want %s:%s", p, st.Uid, st.Gid, nobody.Uid, nobody.Gid)
		}
	}
}

func ptr(s string) *string { return &s }

// TestComposeDefaultUser: without "username", the default user of /init
// applies; an empty default user is E2B's 400 "username not provided".
func TestComposeDefaultUser(t *testing.T) {
	e := newFilesEnv(t, nil)
	e.st.Apply(state.Init{DefaultUser: "nosuchuser-moat"})
	code, body := e.post(t, req([]string{"/x"}, "/y", nil)(e), nil)
	checkErrorBody(t, code, body, 401, "invalid username: 'nosuchuser-moat'")

	h := New(Config{State: &state.State{}, Users: users.NewHostResolver(e.home)})
	job, err := h.planCompose(ComposeRequest{SourcePaths: []string{"/x"}, Destination: "/y"})
	if job != nil || !errors.Is(err, errdefs.ErrInvalidArgument) || err.Error() != "username not provided" {
		t.Fatalf("planCompose without any user = %v, %v", job, err)
	}
}

// FuzzParseComposeRequest: any body is either refused as invalid_argument
// with one of E2B's texts, or yields the two required fields.
func FuzzParseComposeRequest(f *testing.F) {
	for _, s := range []string{"", "null", "{}", `{"source_paths":["a"],"destination":"b"}`,
		`{"source_paths":[null],"destination":"b","username":null}`, `{"SOURCE_PATHS":["a"],"Destination":"b"} trailing`,
		`{"source_paths":"a"}`, `[1,2]`, `{"source_paths":["a"],"destination":""}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req, err := parseComposeRequest(strings.NewReader(body))
		if err != nil {
			msg, _ := errdefs.PublicMessage(err)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !(strings.HasPrefix(msg, "invalid request body: ") ||
				msg == "source_paths must not be empty" || msg == "destination is required") {
				t.Fatalf("refusal %q (%v)", msg, err)
			}
			return
		}
		if len(req.SourcePaths) == 0 || req.Destination == "" {
			t.Fatalf("accepted %+v", req)
		}
	})
}
