package secrets

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

func newService(t *testing.T) (*Service, *store.DB, *Keyring) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(context.Background(), filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := NewKeyring(filepath.Join(dir, KeyFile))
	return NewService(db, keys), db, keys
}

func TestCanonicalName(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"OpenAI_Key-1", "openai_key-1", true},
		{"a", "a", true},
		{strings.Repeat("x", MaxNameLen), strings.Repeat("x", MaxNameLen), true},
		{strings.Repeat("x", MaxNameLen+1), "", false},
		{"", "", false},
		{"has space", "", false},
		{"dot.ted", "", false},
		{"br{ace}", "", false},
		{"sec_abc", "", false},
		{"SEC_abc", "", false},
		{"ünï", "", false},
	}
	for _, tt := range tests {
		got, err := CanonicalName(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("CanonicalName(%q) = %q, %v", tt.in, got, err)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CanonicalName(%q): %v is not ErrInvalidArgument", tt.in, err)
		}
	}
}

func TestServiceRefusesBadInputAndWritesNothing(t *testing.T) {
	svc, _, _ := newService(t)
	ctx := context.Background()
	many := map[string]string{}
	for i := 0; i <= MaxMetadata; i++ {
		many[strings.Repeat("k", i+1)] = "v"
	}
	tests := []struct {
		name, secret, value string
		md                  map[string]string
	}{
		{"bad name", "a b", "s3cr3t", nil},
		{"empty value", "n1", "", nil},
		{"oversize value", "n2", strings.Repeat("Q", MaxValueBytes+1), nil},
		{"too many metadata", "n3", "s3cr3t", many},
		{"long metadata key", "n4", "s3cr3t", map[string]string{strings.Repeat("k", MaxMetaKeyBytes+1): "v"}},
		{"long metadata value", "n5", "s3cr3t", map[string]string{"k": strings.Repeat("v", MaxMetaValueBytes+1)}},
		{"empty metadata key", "n6", "s3cr3t", map[string]string{"": "v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := svc.Create(ctx, "a", tt.secret, tt.value, tt.md)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("err = %v", err)
			}
			if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "QQQQ") {
				t.Fatal("the error quotes the value")
			}
		})
	}
	if list, err := svc.List(ctx, "a", "", 100); err != nil || len(list) != 0 {
		t.Fatalf("list after refused creates = %v, %v", list, err)
	}
	if _, err := svc.Create(ctx, "a", "ok", strings.Repeat("v", MaxValueBytes), nil); err != nil {
		t.Fatalf("a value at the limit: %v", err)
	}
	if _, err := svc.Update(ctx, "a", "ok", "", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("empty update: %v", err)
	}
	if s, err := svc.Get(ctx, "a", "ok"); err != nil || s.CurrentVersion != 1 {
		t.Fatalf("after a refused update: %+v, %v", s, err)
	}
}

func TestServiceValueAndRotate(t *testing.T) {
	svc, db, keys := newService(t)
	ctx := context.Background()
	s, err := svc.Create(ctx, "a", "Tok", "one", map[string]string{"env": "prod"})
	if err != nil || s.Name != "tok" || !strings.HasPrefix(s.ID, store.SecretIDPrefix) {
		t.Fatalf("create = %+v, %v", s, err)
	}
	if _, err := svc.Update(ctx, "a", s.ID, "two", nil); err != nil {
		t.Fatal(err)
	}
	if v, err := svc.Value(ctx, "a", "TOK"); err != nil || string(v) != "two" {
		t.Fatalf("value = %q, %v", v, err)
	}
	if _, err := svc.Value(ctx, "b", "tok"); !errdefs.IsNotFound(err) {
		t.Fatalf("another team's value: %v", err)
	}
	before, _ := keys.Current()
	id, n, err := Rotate(ctx, db, keys)
	if err != nil || n != 2 || id == before {
		t.Fatalf("rotate = %s, %d, %v", id, n, err)
	}
	if _, c, err := db.SecretValue(ctx, "a", "tok"); err != nil || c.KeyID != id {
		t.Fatalf("after rotate: key %s, %v", c.KeyID, err)
	}
	if v, err := svc.Value(ctx, "a", "tok"); err != nil || string(v) != "two" {
		t.Fatalf("value after rotate = %q, %v", v, err)
	}
	if _, n, err := Rotate(ctx, db, keys); err != nil || n != 2 {
		t.Fatalf("second rotate = %d, %v", n, err)
	}
}
