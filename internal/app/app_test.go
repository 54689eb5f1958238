package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// testHostLock is the host lock of in-process servers with fake runtimes,
// which touch no host object: one per test, so they run beside a real server.
func testHostLock(t *testing.T) string { return filepath.Join(t.TempDir(), "host.lock") }

// fakeRuntimeWithBase registers a fake runtime as name and returns it with
// a data dir whose store holds a template "base".
func fakeRuntimeWithBase(t *testing.T, name string) (*orchestratortest.Runtime, string) {
	t.Helper()
	rt := orchestratortest.NewRuntime(t)
	runtime.Register(name, func(context.Context, runtime.Config) (runtime.Runtime, error) { return rt, nil })
	dir := t.TempDir()
	db, err := store.Open(context.Background(), filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.UpsertTemplate(context.Background(), store.Template{Name: "base", RootfsDir: "/x"}); err != nil {
		t.Fatal(err)
	}
	return rt, dir
}

func start(t *testing.T, dir string, envdPort int) (base string, stdout *syncBuf, stop func()) {
	t.Helper()
	return startRuntime(t, dir, envdPort, "apptest")
}

func startRuntime(t *testing.T, dir string, envdPort int, rtName string) (base string, stdout *syncBuf, stop func()) {
	t.Helper()
	return startWith(t, Config{DataDir: dir, EnvdPort: envdPort, Runtime: rtName})
}

// startWith runs Serve with cfg on a free port and the test's own host
// lock, its output captured.
func startWith(t *testing.T, cfg Config) (base string, stdout *syncBuf, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuf{}, &syncBuf{}
	cfg.Addr, cfg.Stdout, cfg.Stderr, cfg.HostLock = "127.0.0.1:0", stdout, stderr, testHostLock(t)
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg) }()
	re := regexp.MustCompile(`moat listening on (\S+)`)
	testkit.WaitFor(t, 5*time.Second, "listening line", func() bool { return re.MatchString(stderr.String()) })
	base = "http://" + re.FindStringSubmatch(stderr.String())[1]
	return base, stdout, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("Serve did not stop")
		}
	}
}

func TestServeEndToEnd(t *testing.T) {
	rt := orchestratortest.NewRuntime(t)
	runtime.Register("apptest", func(context.Context, runtime.Config) (runtime.Runtime, error) { return rt, nil })
	dir := t.TempDir()
	ctx := context.Background()

	base, stdout, stop := start(t, dir, rt.EnvdPort)
	m := regexp.MustCompile(`Created API key: (e2b_[0-9a-f]{40})`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no key printed: %q", stdout.String())
	}
	key := m[1]
	db, err := store.Open(ctx, filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.UpsertTemplate(ctx, store.Template{Name: "base", RootfsDir: "/x"}); err != nil {
		t.Fatal(err)
	}

	call := func(method, path, body string, hdr map[string]string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("X-API-KEY", key)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
	if code, _ := call("GET", "/health", "", nil); code != 200 {
		t.Fatalf("health %d", code)
	}
	code, body := call("POST", "/v2/sandboxes", `{"templateID":"base"}`, nil)
	if code != 201 {
		t.Fatalf("create %d %s", code, body)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	json.Unmarshal(body, &sb)
	route := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": strconv.Itoa(rt.EnvdPort)}
	if code, body := call("GET", "/health", "", route); code != 204 {
		t.Fatalf("proxied envd health %d %s", code, body)
	}
	if code, _ := call("POST", "/init", "{}", route); code != 404 {
		t.Fatalf("proxied /init %d", code)
	}
	stop()

	// Restart: the sandbox is adopted, no second key is printed.
	base, stdout, stop = start(t, dir, rt.EnvdPort)
	defer stop()
	if strings.Contains(stdout.String(), "Created API key") {
		t.Fatal("second key created")
	}
	if code, body := call("GET", "/sandboxes/"+sb.SandboxID, "", nil); code != 200 {
		t.Fatalf("after restart %d %s", code, body)
	}
	if code, _ := call("DELETE", "/sandboxes/"+sb.SandboxID, "", nil); code != 204 {
		t.Fatalf("kill %d", code)
	}
	if code, body := call("GET", "/health", "", route); code != 502 || !strings.Contains(string(body), "The sandbox was not found") {
		t.Fatalf("dead sandbox via proxy %d %s", code, body)
	}
}

func TestCLIHelpers(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	key, err := CreateAPIKey(ctx, dir, "")
	if err != nil || !strings.HasPrefix(key, "e2b_") {
		t.Fatalf("key %q %v", key, err)
	}
	ts, err := ListTemplates(ctx, dir)
	if err != nil || len(ts) != 0 {
		t.Fatalf("templates %v %v", ts, err)
	}
	if err := Serve(ctx, Config{}); err == nil {
		t.Fatal("Serve without DataDir succeeded")
	}
	if err := Serve(ctx, Config{DataDir: dir, Runtime: "nope", Addr: "127.0.0.1:0", HostLock: testHostLock(t)}); err == nil ||
		!strings.Contains(err.Error(), "not available") {
		t.Fatalf("unknown runtime: %v", err)
	}
}

func TestServeSpeaksH2C(t *testing.T) {
	rt := orchestratortest.NewRuntime(t)
	runtime.Register("apptest-h2c", func(context.Context, runtime.Config) (runtime.Runtime, error) { return rt, nil })
	base, _, stop := startRuntime(t, t.TempDir(), rt.EnvdPort, "apptest-h2c")
	defer stop()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{Protocols: &p}}
	resp, err := c.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("proto %s status %d", resp.Proto, resp.StatusCode)
	}
}

// TestOneServerPerDataDir: a second server on the same data dir refuses to
// start (its Recover would remove the first one's sandboxes).
func TestOneServerPerDataDir(t *testing.T) {
	rt := orchestratortest.NewRuntime(t)
	runtime.Register("apptest-lock", func(context.Context, runtime.Config) (runtime.Runtime, error) { return rt, nil })
	dir := t.TempDir()
	_, _, stop := startRuntime(t, dir, rt.EnvdPort, "apptest-lock")
	err := Serve(context.Background(), Config{Addr: "127.0.0.1:0", DataDir: dir, Runtime: "apptest-lock",
		Stdout: &syncBuf{}, Stderr: &syncBuf{}, EnvdPort: rt.EnvdPort, HostLock: testHostLock(t)})
	if err == nil || !strings.Contains(err.Error(), "another moat serve") {
		t.Fatalf("second Serve: %v", err)
	}
	stop()
	// Once the first is gone, the data dir is free again.
	_, _, stop2 := startRuntime(t, dir, rt.EnvdPort, "apptest-lock")
	stop2()
}

// TestOneServerPerHost: a second server with another data dir but the same
// host lock refuses to start before touching anything, naming the first.
func TestOneServerPerHost(t *testing.T) {
	rt := orchestratortest.NewRuntime(t)
	runtime.Register("apptest-hostlock", func(context.Context, runtime.Config) (runtime.Runtime, error) { return rt, nil })
	lock := testHostLock(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &syncBuf{}
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Config{Addr: "127.0.0.1:0", DataDir: dirA, Runtime: "apptest-hostlock", Stdout: &syncBuf{},
			Stderr: stderr, EnvdPort: rt.EnvdPort, HostLock: lock})
	}()
	testkit.WaitFor(t, 5*time.Second, "listening line", func() bool { return strings.Contains(stderr.String(), "moat listening") })
	err := Serve(context.Background(), Config{Addr: "127.0.0.1:0", DataDir: dirB, Runtime: "apptest-hostlock",
		Stdout: &syncBuf{}, Stderr: &syncBuf{}, EnvdPort: rt.EnvdPort, HostLock: lock})
	if err == nil || !strings.Contains(err.Error(), "another moat serve") || !strings.Contains(err.Error(), dirA) {
		t.Fatalf("second Serve: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSecureDataDir: the data dir and its children get the documented
// modes, also when an older version left them open.
func TestSecureDataDir(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"sandboxes", "templates/base/rootfs", "cache/apt", "disks", "vm"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"moat.db", "serve.lock", "templates/base/build.log"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := SecureDataDir(dir); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{
		".": 0o711, "sandboxes": 0o711, "templates": 0o711, "templates/base": 0o711, "cache": 0o711,
		"templates/base/rootfs": 0o700, "disks": 0o700, "vm": 0o700, "cache/apt": 0o755,
		"moat.db": 0o600, "serve.lock": 0o600, "templates/base/build.log": 0o600,
	}
	for p, mode := range want {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, want %v", p, fi.Mode().Perm(), mode)
		}
	}
}

// TestFirstKeyIsDefaultTeam: the key printed at first start belongs to the
// default team, and none is added once any key (of any team) exists.
func TestFirstKeyIsDefaultTeam(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	db, err := openStore(ctx, StoreLocation(dir, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out bytes.Buffer
	if err := ensureAPIKey(ctx, db, &out); err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(strings.TrimPrefix(out.String(), "Created API key: "))
	if team, ok, err := db.CheckAPIKey(ctx, key); err != nil || !ok || team != store.DefaultTeam {
		t.Fatalf("first key %q: team %q ok %v err %v", key, team, ok, err)
	}
	if err := ensureAPIKey(ctx, db, &out); err != nil {
		t.Fatal(err)
	}
	if n, _ := db.CountAPIKeys(ctx); n != 1 {
		t.Fatalf("keys = %d after a second start", n)
	}
	if _, err := CreateAPIKey(ctx, t.TempDir(), "Not A Team"); err == nil || !strings.Contains(err.Error(), "invalid team name") {
		t.Fatalf("bad team: %v", err)
	}
}
