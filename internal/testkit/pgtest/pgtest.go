// Package pgtest runs a private PostgreSQL server for tests, from Debian's
// postgresql package: initdb in a fresh directory, a server that listens
// only on a unix socket in that directory, a database per caller, and
// everything stopped and removed when the test ends. Tests of the
// PostgreSQL store and of the cluster start one each; nothing depends on
// a system-wide cluster or a login.
//
// PostgreSQL refuses to run as root, so under root the server runs as the
// unprivileged user nobody (the directory is handed to it); root still
// reaches the socket. Missing binaries are a missing prerequisite
// (testkit.Missing: a failure under scripts/test.sh).
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/store/pgsql"
	"github.com/moatsh/moat/internal/testkit"
)

// nobody is the unprivileged user the server runs as under root.
const nobody = 65534

// Server is one running PostgreSQL server.
type Server struct {
	dir  string // data in dir/data, the socket in dir
	bin  string // PostgreSQL's binaries
	cmd  *exec.Cmd
	done chan struct{}
	n    atomic.Int64
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

// Start starts a server for t and stops it (removing its files) when t
// ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := BinDir()
	if bin == "" {
		testkit.Missing(t, "PostgreSQL (Debian package postgresql-15: /usr/lib/postgresql/*/bin/postgres)")
	}
	dir, err := os.MkdirTemp("", "moat-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{dir: dir, bin: bin}
	if err := s.initdb(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	s.Restart(t)
	return s
}

// Restart starts the server again after Stop (its data kept) and waits
// until it accepts connections.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.cmd = s.command(filepath.Join(s.bin, "postgres"), "-D", filepath.Join(s.dir, "data"), "-k", s.dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=200")
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start postgres: %v", err)
	}
	done := make(chan struct{})
	s.done = done
	go func() { s.cmd.Wait(); logf.Close(); close(done) }()
	if err := s.waitReady(30 * time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		t.Fatalf("postgres did not start: %v\n%s", err, log)
	}
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
			return err
		}
	}
	cmd := s.command(filepath.Join(s.bin, "initdb"), "-D", filepath.Join(s.dir, "data"),
		"-U", "moat", "--auth=trust", "--locale=C", "--encoding=UTF8", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return nil
}

func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("postgres exited")
		default:
		}
		if err = s.ping(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func (s *Server) ping() error {
	db, err := pgsql.Open(s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
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

// Dir is the socket's directory.
func (s *Server) Dir() string { return s.dir }

// DSN is the URL of database db on this server, as user moat.
func (s *Server) DSN(db string) string {
	return "postgres://moat@/" + db + "?host=" + s.dir + "&sslmode=disable"
}

// Exec runs statements (no arguments) on database db.
func (s *Server) Exec(t testing.TB, db string, stmts ...string) {
	t.Helper()
	c, err := pgsql.Open(s.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range stmts {
		if _, err := c.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// NewDB creates an empty database and returns its URL.
func (s *Server) NewDB(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d", s.n.Add(1))
	s.Exec(t, "postgres", "CREATE DATABASE "+name)
	return s.DSN(name)
}

// Open opens dsn with database/sql (for checks beside the store).
func Open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := pgsql.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
