package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/store/storetest"
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
