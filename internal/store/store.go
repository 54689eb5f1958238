// Package store persists Moat's control-plane state (templates, API keys,
// sandboxes) in one SQLite file, so that `moat serve` survives restarts and
// the CLI can read and write the same data. Schema changes are numbered,
// embedded migrations recorded in schema_version.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store/eventstore"
	"github.com/moatsh/moat/internal/store/secretstore"
	"github.com/moatsh/moat/internal/store/sqlbase"
)

//go:embed migrations/*.sql
var migrations embed.FS

var (
	errInvalid       = errdefs.ErrInvalidArgument
	errAlreadyExists = errdefs.ErrAlreadyExists
)

// DB is the store. It is safe for concurrent use; several processes may open
// the same file (WAL, busy timeout).
//
// Writes go through one connection, so concurrent writers of this process
// queue in Go (bounded by their contexts) instead of meeting SQLITE_BUSY
// in SQLite; reads use a pool of read-only connections and, with WAL,
// never wait behind a write.
type DB struct {
	w *sql.DB // the one writer
	r *sql.DB // readers
	*secretstore.Table
	*eventstore.Tables
}

// maxReaders bounds the read pool: enough for list and lookup requests to
// run beside each other, few enough to keep file handles and memory small.
const maxReaders = 8

// Open opens (creating if needed) the database at path and applies pending
// migrations. The caller must Close it.
//
// The file holds secrets (API key hashes, every sandbox's envd access token
// and envVars), so it and its -wal/-shm are 0600: Open creates it so (SQLite
// gives -wal and -shm the database file's mode) and tightens files an older
// version left readable. Tokens and envVars are stored in the clear on
// purpose: the E2B connect route returns envdAccessToken to the SDK again,
// and the orchestrator re-sends token and envVars to envd's /init on every
// resume and copies them into snapshots (and sandboxes made from them), so
// both must be at hand for as long as the sandbox or snapshot exists.
func Open(ctx context.Context, path string) (*DB, error) {
	if err := restrict(path); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	base := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"
	w, err := sql.Open("sqlite", base+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	d := &DB{w: w}
	if err := d.migrate(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("migrate store %s: %w", path, err)
	}
	// Readers open after the migration made the file WAL.
	d.r, err = sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	d.r.SetMaxOpenConns(maxReaders)
	d.Table = secretstore.New(d.w, d.r)
	d.Tables = eventstore.New(d.w, d.r)
	if err := restrict(path); err != nil { // -wal and -shm exist now
		d.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return d, nil
}

// restrict creates path 0600 if it is missing and makes it, its -wal and
// its -shm 0600 (owner only).
func restrict(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close releases the database.
func (d *DB) Close() error {
	err := d.w.Close()
	if d.r != nil {
		err = errors.Join(err, d.r.Close())
	}
	return err
}

func (d *DB) migrate(ctx context.Context) error {
	tx, err := d.w.BeginTx(ctx, nil)
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
	err := d.r.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&v)
	return v, err
}

// The tables' shared pieces (sqlbase), under the names this package uses.
var (
	notFound = sqlbase.NotFound
	toUnix   = sqlbase.ToUnix
	fromUnix = sqlbase.FromUnix
	nonNil   = sqlbase.NonNil
)

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
