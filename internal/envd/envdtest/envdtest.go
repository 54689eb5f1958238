// Package envdtest starts a real envd binary (built from cmd/envd) in host
// mode for integration tests, so that tests exercise the same process,
// listener and wire behaviour that SDKs see.
package envdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/state"
)

const (
	pkg          = "github.com/moatsh/moat/cmd/envd"
	listenPrefix = "envd listening on "
	startTimeout = 60 * time.Second
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Envd is a running envd process.
type Envd struct {
	// URL is the base URL, e.g. "http://127.0.0.1:40123".
	URL string
	// Home is the home directory of root and user.
	Home string
	// Cmd is the running process.
	Cmd *exec.Cmd
	// AccessToken is the token set by the last Init (sent by later Inits).
	AccessToken string

	out *syncBuffer
}

type config struct {
	env  []string
	args []string
}

// Option configures Start.
type Option func(*config)

// WithEnv adds KEY=VALUE variables to envd's environment.
func WithEnv(kv ...string) Option { return func(c *config) { c.env = append(c.env, kv...) } }

// WithArgs adds command-line arguments.
func WithArgs(args ...string) Option { return func(c *config) { c.args = append(c.args, args...) } }

// Binary returns the path of envd built for this test binary.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "envdtest-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "envd")
		cmd := exec.Command("go", "build", "-o", binPath, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Start runs envd in host mode on a loopback port with a fresh home and
// stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Envd {
	t.Helper()
	var c config
	for _, o := range opts {
		o(&c)
	}
	home := t.TempDir()
	args := append([]string{"--host", "--addr", "127.0.0.1:0", "--home", home}, c.args...)
	cmd := exec.Command(Binary(t), args...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start envd: %v", err)
	}
	e := &Envd{Home: home, Cmd: cmd, out: &syncBuffer{}}
	t.Cleanup(func() { e.stop(t) })
	addr := make(chan string, 1)
	go e.scan(stderr, addr)
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("envd exited before listening; output:\n%s", e.out.String())
		}
		e.URL = "http://" + a
	case <-time.After(startTimeout):
		t.Fatalf("envd did not report its address within %v; output:\n%s", startTimeout, e.out.String())
	}
	return e
}

// scan copies envd's output to the buffer and reports the listen address.
func (e *Envd) scan(r io.Reader, addr chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		e.out.WriteString(line + "\n")
		if a, ok := strings.CutPrefix(line, listenPrefix); ok && !sent {
			addr <- strings.TrimSpace(a)
			sent = true
		}
	}
	if !sent {
		close(addr)
	}
}

// Output returns what envd has logged so far.
func (e *Envd) Output() string { return e.out.String() }

func (e *Envd) stop(t testing.TB) {
	if e.Cmd.Process == nil {
		return
	}
	_ = e.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = e.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-e.Cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	// Take down anything envd started that is still in its group.
	_ = syscall.Kill(-e.Cmd.Process.Pid, syscall.SIGKILL)
	if t.Failed() {
		t.Logf("envd output:\n%s", e.out.String())
	}
}

// Init posts in to /init, sending the token of the previous Init, and fails
// the test unless envd answers 204.
func (e *Envd) Init(t testing.TB, in state.Init) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/init", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.AccessToken != "" {
		req.Header.Set("X-Access-Token", e.AccessToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /init: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /init: %s: %s", resp.Status, b)
	}
	if in.AccessToken != nil {
		e.AccessToken = *in.AccessToken
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) WriteString(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
