// Package pgsql opens PostgreSQL through database/sql so that the store's
// SQL, written once with SQLite's "?" placeholders, runs unchanged on
// PostgreSQL: it wraps pgx's database/sql driver and rewrites each
// statement's placeholders to PostgreSQL's "$n".
//
// It also gives write transactions SQLite's guarantee. SQLite runs one
// write transaction at a time, and the store's read-check-write
// transactions (a template alias taken? a secret's next version?) rely on
// that. Under PostgreSQL's default isolation two API servers could
// interleave them, so every transaction that is not read-only first takes
// one transaction-scoped advisory lock: write transactions are serialized
// cluster-wide, as they are on one host, and single statements (most of
// the store's writes) run beside each other as before.
package pgsql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/moatsh/moat/internal/errdefs"
)

// TxLockKey is the advisory lock every write transaction holds until it
// ends ("moat" in ASCII).
const TxLockKey = 0x6d6f6174

// IsDSN reports whether s names a PostgreSQL database (a postgres:// or
// postgresql:// URL) rather than a SQLite file.
func IsDSN(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Open returns a pool of connections to the database dsn names (a
// postgres:// URL; see pgx.ParseConfig for its parameters). It does not
// connect: the first query does.
func Open(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return sql.OpenDB(connector{stdlib.GetConnector(*cfg)}), nil
}

// Unavailable is the public error a statement gets while PostgreSQL cannot
// be reached or is shutting down: errdefs.ErrUnavailable (503), so that a
// write during an outage is refused with a clear answer, and the cause.
func Unavailable(cause error) error {
	return fmt.Errorf("%w: %w", errdefs.Public(errdefs.ErrUnavailable,
		"the state database (PostgreSQL) is unreachable; try again shortly"), cause)
}

// classify turns the errors of an unreachable or stopping server into
// Unavailable and leaves the rest alone. driver.ErrBadConn stays as it is:
// database/sql retries on a fresh connection when it sees it.
func classify(err error) error {
	if err == nil || errors.Is(err, driver.ErrBadConn) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 08: connection exception; 57P0x: admin or crash shutdown,
		// cannot connect now.
		if strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P") {
			return Unavailable(err)
		}
		return err
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNRESET) {
		return Unavailable(err)
	}
	return err
}

// IsUniqueViolation reports whether err is PostgreSQL's unique_violation.
func IsUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

type connector struct{ driver.Connector }

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, classify(err)
	}
	pc, ok := cn.(*stdlib.Conn)
	if !ok {
		cn.Close()
		return nil, fmt.Errorf("postgres: unexpected driver connection %T", cn)
	}
	return &conn{pc}, nil
}

// conn is pgx's connection with every statement rebound; the methods it
// does not override (Close, Ping, ResetSession, CheckNamedValue) are
// pgx's.
type conn struct{ *stdlib.Conn }

func (c *conn) Prepare(q string) (driver.Stmt, error) {
	st, err := c.Conn.Prepare(Rebind(q))
	return st, classify(err)
}

func (c *conn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	st, err := c.Conn.PrepareContext(ctx, Rebind(q))
	return st, classify(err)
}

func (c *conn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.Conn.ExecContext(ctx, Rebind(q), args)
	return r, classify(err)
}

func (c *conn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.Conn.QueryContext(ctx, Rebind(q), args)
	return r, classify(err)
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx begins a transaction; one that may write takes TxLockKey first.
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.BeginTx(ctx, opts)
	if err != nil || opts.ReadOnly {
		return tx, classify(err)
	}
	lock := []driver.NamedValue{{Ordinal: 1, Value: int64(TxLockKey)}}
	if _, err := c.Conn.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, lock); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("postgres: take the write lock: %w", classify(err))
	}
	return tx, nil
}

// Rebind rewrites q's "?" placeholders to "$1", "$2", ... in order,
// leaving alone those inside string literals ('...'), quoted identifiers
// ("..."), dollar-free line comments (-- ...) and block comments.
func Rebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		case c == '\'' || c == '"':
			j := skipQuoted(q, i, c)
			b.WriteString(q[i:j])
			i = j - 1
		case c == '-' && strings.HasPrefix(q[i:], "--"):
			j := skipTo(q, i+2, "\n")
			b.WriteString(q[i:j])
			i = j - 1
		case c == '/' && strings.HasPrefix(q[i:], "/*"):
			j := skipTo(q, i+2, "*/")
			b.WriteString(q[i:j])
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// skipQuoted returns the index just past the literal that opens at q[i]
// with quote (a doubled quote inside it is part of it), or len(q).
func skipQuoted(q string, i int, quote byte) int {
	for j := i + 1; j < len(q); j++ {
		if q[j] != quote {
			continue
		}
		if j+1 < len(q) && q[j+1] == quote {
			j++
			continue
		}
		return j + 1
	}
	return len(q)
}

// skipTo returns the index just past the first end at or after from, or
// len(q).
func skipTo(q string, from int, end string) int {
	k := strings.Index(q[from:], end)
	if k < 0 {
		return len(q)
	}
	return from + k + len(end)
}

// Redact returns dsn with its password, if any, replaced by "xxxxx", for
// logs and errors.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}
