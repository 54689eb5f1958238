package stmtcache

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/moatsh/moat/internal/bench/benchpair"
)

// counting counts the statements its connections prepare.
type counting struct {
	driver.Connector
	prepared *atomic.Int64
}

func (c counting) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{innerConn: cn.(innerConn), prepared: c.prepared}, nil
}

type countingConn struct {
	innerConn
	prepared *atomic.Int64
}

func (c *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	c.prepared.Add(1)
	return c.innerConn.PrepareContext(ctx, q)
}

// open returns a one-connection pool on a fresh SQLite file keeping up to
// max statements, and the count of statements its driver prepared.
func open(t testing.TB, max int) (*sql.DB, *atomic.Int64) {
	t.Helper()
	c, err := sqlite.NewConnector("file:" + filepath.Join(t.TempDir(), "db") + "?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	n := &atomic.Int64{}
	db := sql.OpenDB(Wrap(counting{c, n}, max))
	db.SetMaxOpenConns(1)
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)`); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := db.Exec(`INSERT INTO t (id, v) VALUES (?, ?)`, i, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	return db, n
}

func value(t *testing.T, db interface {
	QueryRow(string, ...any) *sql.Row
}, id int) string {
	t.Helper()
	var v string
	if err := db.QueryRow(`SELECT v FROM t WHERE id = ?`, id).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestStatementsKept(t *testing.T) {
	db, prepared := open(t, 16)
	before := prepared.Load()
	for i := range 50 {
		if got, want := value(t, db, i%5), fmt.Sprint("v", i%5); got != want {
			t.Fatalf("row %d: %q, want %q", i%5, got, want)
		}
	}
	if n := prepared.Load() - before; n != 1 {
		t.Errorf("50 runs of one query prepared %d statements, want 1", n)
	}
}

// Rows of a query still open when the same query runs again on the same
// connection (a transaction's nested loop): the second run gets a
// statement of its own, and both read what they should.
func TestSameQueryNested(t *testing.T) {
	db, _ := open(t, 16)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const q = `SELECT id, v FROM t WHERE id >= ? ORDER BY id`
	outer, err := tx.Query(q, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for outer.Next() {
		var id int
		var v string
		if err := outer.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		if v != fmt.Sprint("v", id) {
			t.Fatalf("outer row %d: %q", id, v)
		}
		inner, err := tx.Query(q, id)
		if err != nil {
			t.Fatal(err)
		}
		m := 0
		for inner.Next() {
			m++
		}
		if err := inner.Close(); err != nil {
			t.Fatal(err)
		}
		if m != 5-id {
			t.Fatalf("inner query from %d read %d rows, want %d", id, m, 5-id)
		}
		n++
	}
	if err := outer.Err(); err != nil || n != 5 {
		t.Fatalf("outer read %d rows (%v)", n, err)
	}
}

// A run that failed drops its statement; the next run prepares a new one
// and works.
func TestFailedRunDropped(t *testing.T) {
	db, prepared := open(t, 16)
	const ins = `INSERT INTO t (id, v) VALUES (?, ?)`
	if _, err := db.Exec(ins, 10, "v1"); err == nil {
		t.Fatal("duplicate value inserted")
	}
	before := prepared.Load()
	if _, err := db.Exec(ins, 10, "v10"); err != nil {
		t.Fatalf("after a failed run: %v", err)
	}
	if _, err := db.Exec(ins, 11, "v11"); err != nil {
		t.Fatal(err)
	}
	if n := prepared.Load() - before; n != 1 {
		t.Errorf("two runs after a failure prepared %d statements, want 1", n)
	}
	if got := value(t, db, 11); got != "v11" {
		t.Errorf("row 11: %q", got)
	}
}

// Past max, statements are prepared and finalized per run, as without
// the package.
func TestBounded(t *testing.T) {
	db, prepared := open(t, 1) // keeps open's CREATE TABLE
	before := prepared.Load()
	for range 3 {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != 5 {
			t.Fatalf("count %d (%v)", n, err)
		}
		value(t, db, 1)
	}
	if n := prepared.Load() - before; n != 6 {
		t.Errorf("prepared %d statements for 3 runs of two queries past the bound, want 6", n)
	}
}

// BenchmarkKeptStatement times a one-row lookup by primary key, the
// store's commonest statement, with kept statements against database/sql
// preparing and finalizing it per run.
func BenchmarkKeptStatement(b *testing.B) {
	kept, _ := open(b, 16)
	c, err := sqlite.NewConnector("file:" + filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	plain := sql.OpenDB(c)
	defer plain.Close()
	if _, err := plain.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE); INSERT INTO t VALUES (1, 'v1')`); err != nil {
		b.Fatal(err)
	}
	lookup := func(db *sql.DB) time.Duration {
		start := time.Now()
		for range 100 {
			var v string
			if err := db.QueryRow(`SELECT v FROM t WHERE id = ?`, 1).Scan(&v); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start) / 100
	}
	benchpair.Compare(b, "lookup by key",
		benchpair.Way{Name: "kept", Run: func() time.Duration { return lookup(kept) }},
		benchpair.Way{Name: "prepared-per-run", Run: func() time.Duration { return lookup(plain) }})
}
