// Package stmtcache keeps each database connection's prepared statements
// for reuse, keyed by their SQL text. database/sql prepares, runs and
// finalizes a statement for every DB.QueryContext and DB.ExecContext; for
// SQLite (modernc.org/sqlite, a C library translated to Go) compiling the
// statement cost as much as running it: ~5 % of the server's CPU in a
// burst of creates went to sqlite3_prepare. The store's statements are few
// and fixed, so each connection compiles each once.
//
// It wraps a driver's connections (Connector); the wrapped connection does
// not offer driver.QueryerContext or driver.ExecerContext, so database/sql
// goes through PrepareContext, which hands out the kept statement, and
// closing it gives it back instead of finalizing it.
package stmtcache

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
)

// Wrap returns a connector whose connections are inner's, each keeping up
// to max prepared statements.
func Wrap(inner driver.Connector, max int) driver.Connector {
	return &connector{inner: inner, max: max}
}

type connector struct {
	inner driver.Connector
	max   int
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	inner, ok := cn.(innerConn)
	if !ok {
		cn.Close()
		return nil, fmt.Errorf("stmtcache: %T lacks PrepareContext or BeginTx", cn)
	}
	return &conn{innerConn: inner, max: c.max, kept: map[string]*stmt{}}, nil
}

func (c *connector) Driver() driver.Driver { return c.inner.Driver() }

// innerConn is what a wrapped connection must offer.
type innerConn interface {
	driver.Conn
	driver.ConnPrepareContext
	driver.ConnBeginTx
}

// innerStmt is what a statement must offer to be kept.
type innerStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// conn is a driver connection with its kept statements. database/sql never
// uses one connection from two goroutines at once (it holds the
// connection's lock around every call, statements' included), so kept
// needs no lock of its own.
type conn struct {
	innerConn
	max  int
	kept map[string]*stmt
}

// PrepareContext hands out the kept statement for query when it is not in
// use, else prepares one, kept when there is room and none is kept for
// query yet. One in use (rows of the same query still open on this
// connection) gets a second, finalized when closed.
func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if s, ok := c.kept[query]; ok && !s.busy {
		s.busy = true
		return s, nil
	}
	ds, err := c.innerConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	inner, ok := ds.(innerStmt)
	if _, dup := c.kept[query]; dup || !ok || len(c.kept) >= c.max {
		return ds, nil
	}
	s := &stmt{innerStmt: inner, c: c, query: query, busy: true}
	c.kept[query] = s
	return s, nil
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// Close finalizes the kept statements, then closes the connection.
func (c *conn) Close() error {
	var errs []error
	for q, s := range c.kept {
		errs = append(errs, s.innerStmt.Close())
		delete(c.kept, q)
	}
	return errors.Join(append(errs, c.innerConn.Close())...)
}

func (c *conn) ResetSession(ctx context.Context) error {
	if r, ok := c.innerConn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *conn) IsValid() bool {
	if v, ok := c.innerConn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) Ping(ctx context.Context) error {
	if p, ok := c.innerConn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// stmt is a kept statement. A run that failed drops it at its Close: the
// statement's state after an error is the driver's business, and
// preparing it again is cheap next to being wrong.
type stmt struct {
	innerStmt
	c      *conn
	query  string
	busy   bool // handed out and not closed yet
	broken bool // a run failed: finalize at Close
}

// Close gives the statement back, or finalizes it after a failed run.
func (s *stmt) Close() error {
	s.busy = false
	if !s.broken {
		return nil
	}
	if s.c.kept[s.query] == s {
		delete(s.c.kept, s.query)
	}
	return s.innerStmt.Close()
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	r, err := s.innerStmt.ExecContext(ctx, args)
	s.broken = s.broken || err != nil
	return r, err
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	r, err := s.innerStmt.QueryContext(ctx, args)
	s.broken = s.broken || err != nil
	return r, err
}
