package secrets

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/store"
)

func TestKeyringCreatesKeyFileOnFirstUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), KeyFile)
	k := NewKeyring(path)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("key file exists before first use: %v", err)
	}
	c, err := k.Seal("sec_1", 1, []byte("hunter2"))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, fi.Mode())
	}
	if bytes.Contains(c.Data, []byte("hunter2")) {
		t.Fatal("ciphertext contains the plaintext")
	}
	// a second keyring on the same file (a restart) opens it
	v, err := NewKeyring(path).Open("sec_1", 1, c)
	if err != nil || string(v) != "hunter2" {
		t.Fatalf("open = %q, %v", v, err)
	}
}

func TestKeyringOpenRefuses(t *testing.T) {
	k := NewKeyring(filepath.Join(t.TempDir(), KeyFile))
	c, err := k.Seal("sec_1", 2, []byte("value"))
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), c.Data...)
	flipped[len(flipped)-1] ^= 1
	tests := []struct {
		name    string
		id      string
		version int64
		c       store.SecretCipher
	}{
		{"another secret", "sec_2", 2, c},
		{"another version", "sec_1", 1, c},
		{"tampered", "sec_1", 2, store.SecretCipher{KeyID: c.KeyID, Data: flipped}},
		{"unknown key", "sec_1", 2, store.SecretCipher{KeyID: "nope", Data: c.Data}},
		{"short", "sec_1", 2, store.SecretCipher{KeyID: c.KeyID, Data: c.Data[:4]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if v, err := k.Open(tt.id, tt.version, tt.c); err == nil {
				t.Fatalf("opened: %q", v)
			}
		})
	}
}

func TestKeyringBadFiles(t *testing.T) {
	tests := []struct {
		name string
		data string
		mode os.FileMode
		want string
	}{
		{"readable by others", "k1 " + strings.Repeat("A", 43) + "=\n", 0o644, "mode"},
		{"empty", "# nothing\n", 0o600, "no key"},
		{"short key", "k1 AAAA\n", 0o600, "base64"},
		{"no ID", "AAAA\n", 0o600, "want"},
		{"repeated ID", "k1 " + strings.Repeat("A", 43) + "=\nk1 " + strings.Repeat("B", 43) + "=\n", 0o600, "repeated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), KeyFile)
			if err := os.WriteFile(path, []byte(tt.data), tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := NewKeyring(path).Seal("sec_1", 1, []byte("v"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestKeyringAddKeyKeepsOldKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), KeyFile)
	k := NewKeyring(path)
	old, err := k.Seal("sec_1", 1, []byte("old"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := k.AddKey()
	if err != nil || id == old.KeyID {
		t.Fatalf("add key = %s, %v", id, err)
	}
	c, err := k.Seal("sec_1", 2, []byte("new"))
	if err != nil || c.KeyID != id {
		t.Fatalf("seal after add = %s, %v", c.KeyID, err)
	}
	k2 := NewKeyring(path)
	for _, tc := range []struct {
		v int64
		c store.SecretCipher
		w string
	}{{1, old, "old"}, {2, c, "new"}} {
		if v, err := k2.Open("sec_1", tc.v, tc.c); err != nil || string(v) != tc.w {
			t.Fatalf("open v%d = %q, %v", tc.v, v, err)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file after add: %v %v", err, fi.Mode())
	}
}
