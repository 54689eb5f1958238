// Package pgtest runs a private PostgreSQL server for tests, from Debian's
// postgresql package: initdb in a fresh directory, a server that listens
// only on a unix socket in that directory, a database per caller, and
// everything stopped and removed when the test ends. Tests of the
// PostgreSQL store and of the cluster start one each; nothing depends on
// a system-wide cluster or a login. The server itself is package
// pgserver's (also used outside tests); this package ties it to a test.
//
// PostgreSQL refuses to run as root, so under root the server runs as the
// unprivileged user nobody (the directory is handed to it); root still
// reaches the socket. Missing binaries are a missing prerequisite
// (testkit.Missing: a failure under scripts/test.sh).
package pgtest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/moatsh/moat/internal/pgserver"
	"github.com/moatsh/moat/internal/store/pgsql"
	"github.com/moatsh/moat/internal/testkit"
)

// Server is one running PostgreSQL server.
type Server struct {
	s *pgserver.Server
}

// BinDir returns the directory of Debian's newest PostgreSQL binaries
// (/usr/lib/postgresql/<major>/bin), or "" if none is installed.
func BinDir() string { return pgserver.BinDir() }

// Start starts a server for t and stops it (removing its files) when t
// ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if BinDir() == "" {
		testkit.Missing(t, "PostgreSQL (Debian package postgresql-15: /usr/lib/postgresql/*/bin/postgres)")
	}
	s, err := pgserver.Start(context.Background(), pgserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &Server{s: s}
}

// Restart starts the server again after Stop (its data kept) and waits
// until it accepts connections.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Stop shuts the server down (fast shutdown: sessions are ended; killed
// after 10 s). A stopped server stays stopped.
func (s *Server) Stop() { s.s.Stop() }

// Dir is the socket's directory.
func (s *Server) Dir() string { return s.s.Dir() }

// DSN is the URL of database db on this server, as user moat.
func (s *Server) DSN(db string) string { return s.s.DSN(db) }

// Exec runs statements (no arguments) on database db.
func (s *Server) Exec(t testing.TB, db string, stmts ...string) {
	t.Helper()
	if err := s.s.Exec(context.Background(), db, stmts...); err != nil {
		t.Fatal(err)
	}
}

// NewDB creates an empty database and returns its URL.
func (s *Server) NewDB(t testing.TB) string {
	t.Helper()
	dsn, err := s.s.NewDB(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return dsn
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
