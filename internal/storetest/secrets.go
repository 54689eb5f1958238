package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// fakeSeal "encrypts" by tagging the value with its secret and version, so
// the suite can check what was stored where without the keyring.
func fakeSeal(value string) store.SealFunc {
	return func(id string, version int64) (store.SecretCipher, error) {
		return store.SecretCipher{KeyID: "k1", Data: []byte(id + "/" + string(rune('0'+version)) + "/" + value)}, nil
	}
}

func secretsCRUD(t *testing.T, d Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	s, err := d.CreateSecret(ctx, store.Secret{ID: "sec_1", Team: "a", Name: "tok", Metadata: map[string]string{"k": "v"},
		CreatedAt: now}, fakeSeal("one"))
	if err != nil || s.CurrentVersion != 1 || s.Name != "tok" || !s.UpdatedAt.Equal(now) {
		t.Fatalf("create = %+v, %v", s, err)
	}
	// a taken name in the team; the same name in another team is fine
	if _, err := d.CreateSecret(ctx, store.Secret{ID: "sec_2", Team: "a", Name: "tok", CreatedAt: now},
		fakeSeal("x")); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate name: %v", err)
	}
	if _, err := d.CreateSecret(ctx, store.Secret{ID: "sec_3", Team: "b", Name: "tok", CreatedAt: now},
		fakeSeal("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateSecret(ctx, store.Secret{ID: "sec_4", Team: "a", Name: "bad", CreatedAt: now},
		func(string, int64) (store.SecretCipher, error) { return store.SecretCipher{}, errors.New("no key") }); err == nil {
		t.Fatal("a failing seal must fail the create")
	}
	if _, err := d.GetSecret(ctx, "a", "bad"); !errdefs.IsNotFound(err) {
		t.Fatalf("a failed create wrote a row: %v", err)
	}
	for _, key := range []string{"sec_1", "tok", "TOK"} {
		if g, err := d.GetSecret(ctx, "a", key); err != nil || g.ID != "sec_1" || g.Metadata["k"] != "v" {
			t.Fatalf("get %s = %+v, %v", key, g, err)
		}
	}
	if _, err := d.GetSecret(ctx, "b", "sec_1"); !errdefs.IsNotFound(err) {
		t.Fatalf("another team's secret: %v", err)
	}
	later := now.Add(time.Second)
	u, err := d.UpdateSecret(ctx, "a", "tok", nil, later, fakeSeal("two"))
	if err != nil || u.CurrentVersion != 2 || u.Metadata["k"] != "v" || !u.UpdatedAt.Equal(later) || !u.CreatedAt.Equal(now) {
		t.Fatalf("update = %+v, %v", u, err)
	}
	if u, err = d.UpdateSecret(ctx, "a", "sec_1", map[string]string{}, later, fakeSeal("three")); err != nil ||
		u.CurrentVersion != 3 || len(u.Metadata) != 0 {
		t.Fatalf("update with metadata = %+v, %v", u, err)
	}
	if _, err := d.UpdateSecret(ctx, "b", "sec_1", nil, later, fakeSeal("x")); !errdefs.IsNotFound(err) {
		t.Fatalf("update of another team's secret: %v", err)
	}
	sec, c, err := d.SecretValue(ctx, "a", "tok")
	if err != nil || sec.CurrentVersion != 3 || string(c.Data) != "sec_1/3/three" || c.KeyID != "k1" {
		t.Fatalf("value = %+v %q, %v", sec, c.Data, err)
	}
	if err := d.DeleteSecret(ctx, "b", "sec_1"); !errdefs.IsNotFound(err) {
		t.Fatalf("delete of another team's secret: %v", err)
	}
	if err := d.DeleteSecret(ctx, "a", "TOK"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.SecretValue(ctx, "a", "sec_1"); !errdefs.IsNotFound(err) {
		t.Fatalf("value after delete: %v", err)
	}
	if err := d.DeleteSecret(ctx, "a", "tok"); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	// the name is free again
	if _, err := d.CreateSecret(ctx, store.Secret{ID: "sec_5", Team: "a", Name: "tok", CreatedAt: now}, fakeSeal("y")); err != nil {
		t.Fatal(err)
	}
}

func listSecrets(t *testing.T, d Store) {
	ctx := context.Background()
	for i, n := range []string{"c", "a", "b", "d"} {
		if _, err := d.CreateSecret(ctx, store.Secret{ID: "sec_" + n, Team: "a", Name: n, CreatedAt: time.Now()},
			fakeSeal(n)); err != nil {
			t.Fatal(i, err)
		}
	}
	if _, err := d.CreateSecret(ctx, store.Secret{ID: "sec_other", Team: "b", Name: "a0", CreatedAt: time.Now()},
		fakeSeal("o")); err != nil {
		t.Fatal(err)
	}
	var got []string
	after := ""
	for {
		page, err := d.ListSecrets(ctx, "a", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page {
			got = append(got, s.Name)
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].Name
	}
	if !equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("list = %v", got)
	}
	if page, err := d.ListSecrets(ctx, "nobody", "", 10); err != nil || len(page) != 0 || page == nil {
		t.Fatalf("empty list = %#v, %v", page, err)
	}
}
