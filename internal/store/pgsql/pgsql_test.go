package pgsql

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/moatsh/moat/internal/errdefs"
)

func TestRebind(t *testing.T) {
	tests := []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`SELECT * FROM t WHERE a = ? AND b = ?`, `SELECT * FROM t WHERE a = $1 AND b = $2`},
		{`INSERT INTO t VALUES (?, '?', ?)`, `INSERT INTO t VALUES ($1, '?', $2)`},
		{`SELECT 'it''s ?', ?`, `SELECT 'it''s ?', $1`},
		{`SELECT "we""ird?" FROM t WHERE x = ?`, `SELECT "we""ird?" FROM t WHERE x = $1`},
		{"SELECT ? -- why?\n, ?", "SELECT $1 -- why?\n, $2"},
		{`SELECT /* ? */ ?`, `SELECT /* ? */ $1`},
		{`SELECT '?`, `SELECT '?`},          // unterminated literal: left alone
		{`SELECT ? /* ?`, `SELECT $1 /* ?`}, // unterminated comment
		{"-- ?", "-- ?"},
	}
	for _, tt := range tests {
		if got := Rebind(tt.in); got != tt.want {
			t.Errorf("Rebind(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestIsDSN(t *testing.T) {
	for s, want := range map[string]bool{
		"postgres://u@/db?host=/tmp":  true,
		"postgresql://localhost/moat": true,
		"/var/lib/moat/moat.db":       false,
		"":                            false,
		"sqlite://x":                  false,
	} {
		if got := IsDSN(s); got != want {
			t.Errorf("IsDSN(%q) = %v, want %v", s, got, want)
		}
	}
}

// FuzzRebind checks that rebinding never loses or invents text: every
// byte of q that is not a rewritten "?" comes out unchanged, and the
// placeholders are numbered 1..n in order.
func FuzzRebind(f *testing.F) {
	for _, s := range []string{`a = ? AND b = '?'`, "x -- ?\n?", `/* ? */ "?" ?`, `''''?`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if strings.Contains(q, "$") {
			return // the check below could not tell a "$1" of q from a rewrite
		}
		out := Rebind(q)
		n := strings.Count(q, "?") - strings.Count(out, "?")
		if n < 0 {
			t.Fatalf("Rebind(%q) = %q adds placeholders", q, out)
		}
		// Undo the rewrite: $n back to ?, from the highest n down.
		back := out
		for i := n; i >= 1; i-- {
			tok := "$" + strconv.Itoa(i)
			k := strings.LastIndex(back, tok)
			if k < 0 {
				t.Fatalf("Rebind(%q) = %q lacks %s", q, out, tok)
			}
			back = back[:k] + "?" + back[k+len(tok):]
		}
		if back != q {
			t.Fatalf("Rebind(%q) = %q does not map back (got %q)", q, out, back)
		}
	})
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://moat:s3cret@db:5432/moat": "postgres://moat:xxxxx@db:5432/moat",
		"postgres://moat@/moat?host=/tmp/pg":  "postgres://moat@/moat?host=/tmp/pg",
		"postgres://%zz":                      "postgres://(unparsable URL)",
	} {
		if got := Redact(in); got != want || strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	unavailable := []error{
		&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"},
		&pgconn.PgError{Code: "08006"},
		fmt.Errorf("query: %w", io.ErrUnexpectedEOF),
		&net.OpError{Op: "dial", Net: "unix", Err: syscall.ENOENT},
		syscall.ECONNREFUSED,
	}
	for _, err := range unavailable {
		if got := classify(err); !errors.Is(got, errdefs.ErrUnavailable) || !errors.Is(got, err) {
			t.Errorf("classify(%v) = %v, want ErrUnavailable wrapping it", err, got)
		}
	}
	for _, err := range []error{nil, driver.ErrBadConn, &pgconn.PgError{Code: "23505"}, errors.New("syntax")} {
		if got := classify(err); got != err {
			t.Errorf("classify(%v) = %v, want it unchanged", err, got)
		}
	}
	var pub *errdefs.PublicError
	if !errors.As(Unavailable(io.EOF), &pub) || !strings.Contains(pub.Error(), "PostgreSQL") {
		t.Errorf("Unavailable's public message does not name the database: %v", Unavailable(io.EOF))
	}
}
