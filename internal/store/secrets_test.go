package store

import (
	"context"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// latestMigration is the number of the newest embedded migration.
func latestMigration(t *testing.T) int {
	t.Helper()
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	latest := 0
	for _, f := range files {
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "_", 2)[0])
		if err != nil {
			t.Fatal(f, err)
		}
		latest = max(latest, n)
	}
	return latest
}

// TestSecretsReseal checks that a rotation rewrites only the versions the
// reseal function changes, in every team.
func TestSecretsReseal(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	seal := func(v string) SealFunc {
		return func(string, int64) (SecretCipher, error) { return SecretCipher{KeyID: "old", Data: []byte(v)}, nil }
	}
	for i, team := range []string{"a", "b"} {
		if _, err := d.CreateSecret(ctx, Secret{ID: "sec_" + team, Team: team, Name: "n", CreatedAt: time.Now()},
			seal("v"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.UpdateSecret(ctx, "a", "n", nil, time.Now(), func(string, int64) (SecretCipher, error) {
		return SecretCipher{KeyID: "new", Data: []byte("already")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	n, err := d.ResealSecrets(ctx, func(id string, version int64, c SecretCipher) (SecretCipher, error) {
		if c.KeyID == "new" {
			return c, nil
		}
		return SecretCipher{KeyID: "new", Data: append([]byte("re:"), c.Data...)}, nil
	})
	if err != nil || n != 2 {
		t.Fatalf("reseal = %d, %v; want 2", n, err)
	}
	if _, c, err := d.SecretValue(ctx, "b", "n"); err != nil || c.KeyID != "new" || string(c.Data) != "re:v1" {
		t.Fatalf("b after reseal = %+v, %v", c, err)
	}
	if _, c, err := d.SecretValue(ctx, "a", "n"); err != nil || string(c.Data) != "already" {
		t.Fatalf("a after reseal = %+v, %v", c, err)
	}
}
