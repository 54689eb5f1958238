package interpreter

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/moatsh/moat/internal/jupyter"
)

// bashRunner is the built-in bash "kernel": one persistent bash process per
// context. Each cell is written to a file and sourced (stdin /dev/null), so
// variables, functions, cwd and exports persist across cells; a marker
// printed on stdout and stderr after the cell delimits its output and
// carries its exit status. A non-zero status is reported like bash_kernel
// does: an error with empty name and the status as value. Interrupt sends
// SIGINT to the process group; a `trap 'return 130' INT` aborts the
// sourced cell without killing the shell.
type bashRunner struct {
	cfg Config
	cwd string

	mu     sync.Mutex // guards the fields below
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout chan []byte
	stderr chan []byte
	exited chan struct{}
	dir    string
	seq    int
}

var _ runner = (*bashRunner)(nil)

const bashInit = "trap 'return 130 2>/dev/null' INT\nunset HISTFILE\n"

func startBash(cfg Config, cwd string) (*bashRunner, error) {
	b := &bashRunner{cfg: cfg, cwd: cwd}
	if err := b.start(); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *bashRunner) start() error {
	dir, err := os.MkdirTemp(b.cfg.ConnDir, "bash-cells-*")
	if err != nil {
		return fmt.Errorf("bash cell dir: %w", err)
	}
	if c := b.cfg.Credential; c != nil {
		if err := os.Chown(dir, int(c.Uid), int(c.Gid)); err != nil {
			return fmt.Errorf("chown bash cell dir: %w", err)
		}
	}
	// env --default-signal=INT undoes an inherited SIG_IGN, which a
	// non-interactive bash could not trap.
	cmd := exec.Command("env", "--default-signal=INT", "bash", "--noprofile", "--norc")
	if st, err := os.Stat(b.cwd); err == nil && st.IsDir() {
		cmd.Dir = b.cwd
	}
	cmd.Env = append(os.Environ(), b.cfg.KernelEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: b.cfg.Credential}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("bash stdin: %w", err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("bash stdout: %w", err)
	}
	errR, err := cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("bash stderr: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start bash: %w", err)
	}
	b.cmd, b.stdin, b.dir, b.seq = cmd, stdin, dir, 0
	b.stdout, b.stderr, b.exited = pump(outR), pump(errR), make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(cmd, b.exited)
	if _, err := io.WriteString(stdin, bashInit); err != nil {
		return fmt.Errorf("init bash: %w", err)
	}
	return nil
}

// pump copies r into a channel of chunks, closed at EOF.
func pump(r io.Reader) chan []byte {
	ch := make(chan []byte, 64)
	go func() {
		defer close(ch)
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				ch <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

func newNonce() string {
	var n [8]byte
	_, _ = rand.Read(n[:])
	return hex.EncodeToString(n[:])
}

// submit writes code to a cell file and asks bash to source it, followed
// by the end markers.
func (b *bashRunner) submit(code, marker string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	file := filepath.Join(b.dir, fmt.Sprintf("cell-%d.sh", b.seq))
	if err := os.WriteFile(file, []byte(code+"\n"), 0o600); err != nil {
		return 0, fmt.Errorf("write bash cell: %w", err)
	}
	if c := b.cfg.Credential; c != nil {
		if err := os.Chown(file, int(c.Uid), int(c.Gid)); err != nil {
			return 0, fmt.Errorf("chown bash cell: %w", err)
		}
	}
	cmdline := fmt.Sprintf("source %s </dev/null; __moat_rc=$?; printf '%%s%%d\\n' %s \"$__moat_rc\"; printf '%%s\\n' %s >&2; rm -f %s\n",
		shellQuote(file), marker, marker, shellQuote(file))
	if _, err := io.WriteString(b.stdin, cmdline); err != nil {
		return 0, fmt.Errorf("%w: bash stdin: %v", jupyter.ErrKernelDied, err)
	}
	return b.seq, nil
}

// splitter finds the end marker in one output stream, holding back bytes
// that may be the start of the marker or of a UTF-8 sequence.
type splitter struct {
	marker  []byte
	pending []byte
	found   bool
	tail    []byte // bytes after the marker, up to the newline
}

// feed adds a chunk and returns the text that is safe to emit.
func (s *splitter) feed(chunk []byte) []byte {
	if s.found {
		s.tail = append(s.tail, chunk...)
		return nil
	}
	s.pending = append(s.pending, chunk...)
	if i := bytes.Index(s.pending, s.marker); i >= 0 {
		out := s.pending[:i]
		s.tail = append(s.tail, s.pending[i+len(s.marker):]...)
		s.found, s.pending = true, nil
		return out
	}
	keep := len(s.marker) - 1
	if keep > len(s.pending) {
		keep = len(s.pending)
	}
	cut := len(s.pending) - keep
	// Do not split a UTF-8 sequence: back up to the last rune start.
	for i := cut - 1; i >= 0 && i >= cut-utf8.UTFMax; i-- {
		if utf8.RuneStart(s.pending[i]) {
			if !utf8.FullRune(s.pending[i:cut]) {
				cut = i
			}
			break
		}
	}
	out := append([]byte(nil), s.pending[:cut]...)
	s.pending = s.pending[cut:]
	return out
}

func (s *splitter) complete() bool { return s.found && bytes.IndexByte(s.tail, '\n') >= 0 }

func (b *bashRunner) run(ctx context.Context, code string, emit func(line)) error {
	return b.exec(ctx, code, emit)
}

func (b *bashRunner) runSilent(ctx context.Context, code string) error {
	return b.exec(ctx, code, nil)
}

// exec runs one cell and streams its output; emit nil discards output.
func (b *bashRunner) exec(ctx context.Context, code string, emit func(line)) error {
	marker := "__MOAT_END_" + newNonce() + "__"
	seq, err := b.submit(code, marker)
	if err != nil {
		return err
	}
	b.mu.Lock()
	stdout, stderr, exited := b.stdout, b.stderr, b.exited
	b.mu.Unlock()
	if emit != nil {
		emit(line{Type: "number_of_executions", Fields: map[string]any{"execution_count": seq}})
	}
	out := &splitter{marker: []byte(marker)}
	errS := &splitter{marker: []byte(marker)}
	send := func(typ string, text []byte) {
		if emit != nil && len(text) > 0 {
			emit(line{Type: typ, Fields: map[string]any{"text": string(text), "timestamp": time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")}})
		}
	}
	done := ctx.Done()
	for !(out.complete() && errS.complete()) {
		select {
		case c, ok := <-stdout:
			if !ok {
				return b.deadErr(exited)
			}
			send("stdout", out.feed(c))
		case c, ok := <-stderr:
			if !ok {
				return b.deadErr(exited)
			}
			send("stderr", errS.feed(c))
		case <-done:
			done = nil
			b.interrupt()
		}
	}
	rc, _ := strconv.Atoi(string(bytes.TrimSpace(out.tail[:bytes.IndexByte(out.tail, '\n')])))
	if rc != 0 && emit != nil {
		emit(line{Type: "error", Fields: map[string]any{"name": "", "value": strconv.Itoa(rc), "traceback": ""}})
	}
	if ctx.Err() != nil {
		return fmt.Errorf("execution interrupted: %w", ctx.Err())
	}
	return nil
}

func (b *bashRunner) deadErr(exited chan struct{}) error {
	<-exited
	return fmt.Errorf("%w: bash exited", jupyter.ErrKernelDied)
}

func (b *bashRunner) interrupt() {
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGINT)
}

func (b *bashRunner) restart(ctx context.Context) error {
	b.close()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.start()
}

func (b *bashRunner) dead() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.exited:
		return true
	default:
		return false
	}
}

func (b *bashRunner) close() {
	b.mu.Lock()
	cmd, exited, dir := b.cmd, b.exited, b.dir
	b.mu.Unlock()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	os.RemoveAll(dir)
}
