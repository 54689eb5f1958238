// Package store persists Moat's control-plane state (templates, API keys,
// sandboxes) in one SQLite file, so that `moat serve` survives restarts and
// the CLI can read and write the same data, or in a PostgreSQL database
// that several servers share (Open with a postgres:// URL; package pgsql).
// The SQL is written once, for both. Schema changes are numbered, embedded
// migrations recorded in schema_version, one directory per engine.
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

	"modernc.org/sqlite"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store/eventstore"
	"github.com/moatsh/moat/internal/store/pgsql"
	"github.com/moatsh/moat/internal/store/secretstore"
	"github.com/moatsh/moat/internal/store/sqlbase"
	"github.com/moatsh/moat/internal/store/stmtcache"
)

//go:embed migrations/*.sql pgmigrations/*.sql
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
	w *sql.DB // the one writer (PostgreSQL: the pool)
	r *sql.DB // readers (PostgreSQL: the same pool)
	// migrations is the directory of this engine's schema changes.
	migrations string
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
//
// A path that is a postgres:// URL opens that PostgreSQL database instead
// (see OpenPostgres).
func Open(ctx context.Context, path string) (*DB, error) {
	if pgsql.IsDSN(path) {
		return OpenPostgres(ctx, path)
	}
	if err := restrict(path); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	base := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"
	w, err := openSQLite(base + "&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	d := &DB{w: w, migrations: "migrations"}
	if err := d.migrate(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("migrate store %s: %w", path, err)
	}
	// Readers open after the migration made the file WAL.
	d.r, err = openSQLite(base + "&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	d.r.SetMaxOpenConns(maxReaders)
	d.r.SetMaxIdleConns(maxReaders) // kept open, with their statements (database/sql keeps 2 by default)
	d.Table = secretstore.New(d.w, d.r)
	d.Tables = eventstore.New(d.w, d.r)
	if err := restrict(path); err != nil { // -wal and -shm exist now
		d.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return d, nil
}

// maxPGConns bounds one server's connections to PostgreSQL: creates,
// lookups and the proxy's route checks run beside each other, and a
// cluster of several servers stays well under PostgreSQL's default
// max_connections of 100.
const maxPGConns = 16

// maxStmts bounds the prepared statements each SQLite connection keeps (see
// package stmtcache): more than the store has, so every one is kept.
const maxStmts = 256

// openSQLite opens a pool of SQLite connections to dsn that keep their
// prepared statements.
func openSQLite(dsn string) (*sql.DB, error) {
	c, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(stmtcache.Wrap(c, maxStmts)), nil
}

// OpenPostgres opens the PostgreSQL database dsn names (a postgres:// URL)
// and applies pending migrations. The caller must Close it. PostgreSQL's
// own access control protects the data at rest; what SQLite's file mode
// does for the single-host store, the database's owner and pg_hba.conf do
// here.
func OpenPostgres(ctx context.Context, dsn string) (*DB, error) {
	p, err := pgsql.Open(dsn)
	if err != nil {
		return nil, err
	}
	p.SetMaxOpenConns(maxPGConns)
	p.SetMaxIdleConns(maxPGConns)
	d := &DB{w: p, r: p, migrations: "pgmigrations"}
	if err := d.migrate(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("migrate store %s: %w", pgsql.Redact(dsn), err)
	}
	d.Table = secretstore.New(d.w, d.r)
	d.Tables = eventstore.New(d.w, d.r)
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
	if d.r != nil && d.r != d.w {
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
	files, err := fs.Glob(migrations, d.migrations+"/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		base := strings.TrimPrefix(f, d.migrations+"/")
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

	isUniqueViolation = sqlbase.IsUniqueViolation
)

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ServerLockKey is the session advisory lock a server holds on a
// PostgreSQL store for its life ("moatser" in ASCII).
const ServerLockKey = 0x6d6f61747365727

// WebhookLeadKey is the advisory lock of the one server of a cluster that
// delivers webhooks (Lead).
const WebhookLeadKey = 0x6d6f617477686b

// Lead makes this server the one of all those sharing a PostgreSQL store
// that does the job of key, as long as held reports true: a session
// advisory lock on a connection of its own, which PostgreSQL drops with
// the connection (a crashed or cut-off server loses it, another takes it).
// ok is false while another server holds it. held asks the store whether
// the lock's connection still works. A SQLite store has one server: ok at
// once, held always true.
func (d *DB) Lead(ctx context.Context, key int64) (release func(), held func(context.Context) bool, ok bool, err error) {
	if d.r != d.w {
		return func() {}, func(context.Context) bool { return true }, true, nil
	}
	c, err := d.w.Conn(ctx)
	if err != nil {
		return nil, nil, false, fmt.Errorf("lead %x: %w", key, err)
	}
	if err := c.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(?)`, key).Scan(&ok); err != nil || !ok {
		c.Close()
		if err != nil {
			return nil, nil, false, fmt.Errorf("lead %x: %w", key, err)
		}
		return nil, nil, false, nil
	}
	release = func() {
		c.ExecContext(context.Background(), `SELECT pg_advisory_unlock(?)`, key)
		c.Close()
	}
	held = func(ctx context.Context) bool { return c.PingContext(ctx) == nil }
	return release, held, true, nil
}

// LockServer makes this server the only one using a PostgreSQL store until
// release is called or the process dies (PostgreSQL drops a session lock
// with its connection). A server reconciles every sandbox row with its own
// host at startup and kills what it does not find, so two servers on one
// database would destroy each other's sandboxes; until the cluster's node
// roles exist, a second one is refused with errdefs.ErrConflict. A SQLite
// store is one host's file, locked with its data dir: a no-op here.
func (d *DB) LockServer(ctx context.Context) (release func(), err error) {
	if d.r != d.w {
		return func() {}, nil
	}
	c, err := d.w.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock store: %w", err)
	}
	var ok bool
	if err := c.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(?)`, int64(ServerLockKey)).Scan(&ok); err != nil {
		c.Close()
		return nil, fmt.Errorf("lock store: %w", err)
	}
	if !ok {
		c.Close()
		return nil, errdefs.Publicf(errdefs.ErrConflict, "another moat serve is using this PostgreSQL database; "+
			"one server per database until cluster roles (issue: nodes and API servers) exist")
	}
	return func() {
		c.ExecContext(context.Background(), `SELECT pg_advisory_unlock(?)`, int64(ServerLockKey))
		c.Close()
	}, nil
}
