// Package pgserver runs a private PostgreSQL server from Debian's
// postgresql package: initdb in a fresh directory, a server that listens
// only on a unix socket in that directory, a database per caller, and
// everything stopped and removed at Close. The tests' servers
// (testkit/pgtest) and `moat bench --cluster` (bench/clustersim) start
// one each; nothing depends on a system-wide cluster or a login. It is a
// package of its own, apart from pgtest, because the bench runs in the
// moat binary, which must not import package testing.
//
// PostgreSQL refuses to run as root, so under root the server runs as the
// unprivileged user nobody (the directory is handed to it); root still
// reaches the socket.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/store/pgsql"
)

// nobody is the unprivileged user the server runs as under root.
const nobody = 65534

// ErrMissing is Start's error when no PostgreSQL is installed.
var ErrMissing = errors.New("PostgreSQL is not installed (Debian package postgresql-15: /usr/lib/postgresql/*/bin/postgres)")

// Options tune a server.
type Options struct {
	// Settings are server settings beyond the defaults (fsync off, 200
	// connections), each "name=value" (postgres -c), e.g.
	// "shared_preload_libraries=pg_stat_statements".
	Settings []string
}

// Server is one running PostgreSQL server.
type Server struct {
	dir      string // data in dir/data, the socket in dir
	bin      string // PostgreSQL's binaries
	settings []string
	cmd      *exec.Cmd
	done     chan struct{}
	n        atomic.Int64
}

// BinDir returns the directory of Debian's newest PostgreSQL binaries
// (/usr/lib/postgresql/<major>/bin), or "" if none is installed.
func BinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i]
		}
	}
	return ""
}

// Start makes a new server's data directory and starts it; Close stops it
// and removes its files. ErrMissing when PostgreSQL is not installed.
func Start(ctx context.Context, o Options) (*Server, error) {
	bin := BinDir()
	if bin == "" {
		return nil, ErrMissing
	}
	dir, err := os.MkdirTemp("", "moat-pg-")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Server{dir: dir, bin: bin, settings: o.Settings}
	if err := s.initdb(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.Restart(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Restart starts the server again after Stop (its data kept) and waits
// until it accepts connections.
func (s *Server) Restart(ctx context.Context) error {
	args := []string{"-D", filepath.Join(s.dir, "data"), "-k", s.dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=200"}
	for _, kv := range s.settings {
		args = append(args, "-c", kv)
	}
	s.cmd = s.command(filepath.Join(s.bin, "postgres"), args...)
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	s.done = done
	go func() { s.cmd.Wait(); logf.Close(); close(done) }()
	if err := s.waitReady(ctx, 30*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		return fmt.Errorf("postgres did not start: %w\n%s", err, log)
	}
	return nil
}

// command runs name as the server's user: nobody under root, else the
// caller.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	return cmd
}

func (s *Server) initdb() error {
	if os.Geteuid() == 0 {
		if err := os.Chown(s.dir, nobody, nobody); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	cmd := s.command(filepath.Join(s.bin, "initdb"), "-D", filepath.Join(s.dir, "data"),
		"-U", "moat", "--auth=trust", "--locale=C", "--encoding=UTF8", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return errors.New("postgres exited")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if err = s.ping(ctx); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func (s *Server) ping(ctx context.Context) error {
	db, err := pgsql.Open(s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// Stop shuts the server down (fast shutdown: sessions are ended; killed
// after 10 s). A stopped server stays stopped.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// Close stops the server and removes its files.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.dir)
}

// Dir is the socket's directory.
func (s *Server) Dir() string { return s.dir }

// PID is the server's (the postmaster's) process ID; 0 when not started.
func (s *Server) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// DSN is the URL of database db on this server, as user moat.
func (s *Server) DSN(db string) string {
	return "postgres://moat@/" + db + "?host=" + s.dir + "&sslmode=disable"
}

// Exec runs statements (no arguments) on database db.
func (s *Server) Exec(ctx context.Context, db string, stmts ...string) error {
	c, err := pgsql.Open(s.DSN(db))
	if err != nil {
		return err
	}
	defer c.Close()
	for _, q := range stmts {
		if _, err := c.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// NewDB creates an empty database and returns its URL.
func (s *Server) NewDB(ctx context.Context) (string, error) {
	name := fmt.Sprintf("t%d", s.n.Add(1))
	if err := s.Exec(ctx, "postgres", "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("new database: %w", err)
	}
	return s.DSN(name), nil
}
