// Package store persists Moat's control-plane state (templates, API keys,
// sandboxes) in one SQLite file, so that `moat serve` survives restarts and
// the CLI can read and write the same data. Schema changes are numbered,
// embedded migrations recorded in schema_version.
package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/moatsh/moat/internal/errdefs"
)

//go:embed migrations/*.sql
var migrations embed.FS

var (
	errInvalid       = errdefs.ErrInvalidArgument
	errAlreadyExists = errdefs.ErrAlreadyExists
)

// DB is the store. It is safe for concurrent use; several processes may open
// the same file (WAL, busy timeout).
type DB struct {
	db *sql.DB
}

// Open opens (creating if needed) the database at path and applies pending
// migrations. The caller must Close it.
func Open(ctx context.Context, path string) (*DB, error) {
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	sdb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	d := &DB{db: sdb}
	if err := d.migrate(ctx); err != nil {
		sdb.Close()
		return nil, fmt.Errorf("migrate store %s: %w", path, err)
	}
	return d, nil
}

// Close releases the database.
func (d *DB) Close() error { return d.db.Close() }

func (d *DB) migrate(ctx context.Context) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return err
	}
	var cur int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&cur); err != nil {
		return err
	}
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		base := strings.TrimPrefix(f, "migrations/")
		n, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: bad name", f)
		}
		if n <= cur {
			continue
		}
		body, err := migrations.ReadFile(f)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("migration %s: %w", f, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (?)`, n); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// SchemaVersion returns the applied schema version.
func (d *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := d.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&v)
	return v, err
}

func notFound(what, id string) error {
	return fmt.Errorf("%s %q: %w", what, id, errdefs.ErrNotFound)
}

func toUnix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnix(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
