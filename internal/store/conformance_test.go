package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/storetest"
	"github.com/moatsh/moat/internal/testkit/pgtest"
)

// TestConformance runs the store suite against SQLite, the default
// implementation; what is particular to SQLite is tested beside it.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store {
		d, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "moat.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}

// TestConformancePostgres runs the same suite against PostgreSQL (a
// private server from Debian's package, a database per test).
func TestConformancePostgres(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Store {
		d, err := store.Open(context.Background(), srv.NewDB(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}
