// Package secrets keeps a team's named secrets: values write-only through
// the API (never returned, never logged), encrypted at rest with
// AES-256-GCM under a key kept outside the database, in a key file
// (<data dir>/secrets.key, mode 0600, created on first use). Each stored
// version names the key that sealed it, so a rotation adds a key, makes it
// the one new writes use and re-encrypts the stored versions (Rotate),
// while older keys stay readable until no version needs them. It also
// validates E2B's network.rules (per-domain header transforms with
// ${e2b.secrets.NAME} placeholders).
package secrets

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/moatsh/moat/internal/store"
)

// KeyFile is the key file's name in the data dir.
const KeyFile = "secrets.key"

const keySize = 32 // AES-256

// Keyring holds the keys of a key file: lines "<key ID> <base64 key>",
// the last one current (new writes use it), the others kept for reading
// versions sealed before a rotation. The file is read on first use and
// created (one fresh key) if missing.
type Keyring struct {
	path string

	mu      sync.Mutex
	loaded  bool
	keys    map[string]cipher.AEAD
	current string
}

// NewKeyring returns the keyring of the key file at path; nothing is read
// until a value is sealed or opened.
func NewKeyring(path string) *Keyring { return &Keyring{path: path} }

// load reads the key file, creating it with one key when it is missing.
func (k *Keyring) load() error {
	if k.loaded {
		return nil
	}
	data, err := os.ReadFile(k.path)
	if errors.Is(err, os.ErrNotExist) {
		line, lerr := newKeyLine()
		if lerr != nil {
			return lerr
		}
		if err := writeKeyFile(k.path, []byte(line)); err != nil {
			return err
		}
		data = []byte(line)
	} else if err != nil {
		return fmt.Errorf("secrets key file: %w", err)
	}
	if err := checkMode(k.path); err != nil {
		return err
	}
	keys, current, err := parseKeys(data)
	if err != nil {
		return fmt.Errorf("secrets key file %s: %w", k.path, err)
	}
	k.keys, k.current, k.loaded = keys, current, true
	return nil
}

// checkMode refuses a key file others can read or write.
func checkMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("secrets key file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("secrets key file %s has mode %o: want 0600 (chmod 600 it)", path, fi.Mode().Perm())
	}
	return nil
}

func parseKeys(data []byte) (map[string]cipher.AEAD, string, error) {
	keys := map[string]cipher.AEAD{}
	current := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, enc, ok := strings.Cut(line, " ")
		if !ok || id == "" {
			return nil, "", fmt.Errorf("line %d: want \"<key ID> <base64 key>\"", n)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
		if err != nil || len(raw) != keySize {
			return nil, "", fmt.Errorf("line %d: key %s is not %d base64-encoded bytes", n, id, keySize)
		}
		if _, dup := keys[id]; dup {
			return nil, "", fmt.Errorf("line %d: key ID %s repeated", n, id)
		}
		aead, err := newAEAD(raw)
		if err != nil {
			return nil, "", err
		}
		keys[id], current = aead, id
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	if current == "" {
		return nil, "", errors.New("no key")
	}
	return keys, current, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return cipher.NewGCM(block)
}

// newKeyLine makes a fresh key and its key-file line.
func newKeyLine() (string, error) {
	id, key := make([]byte, 4), make([]byte, keySize)
	if _, err := rand.Read(id); err != nil {
		return "", fmt.Errorf("new secrets key: %w", err)
	}
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("new secrets key: %w", err)
	}
	return "k" + hex.EncodeToString(id) + " " + base64.StdEncoding.EncodeToString(key) + "\n", nil
}

// writeKeyFile replaces path atomically with data, mode 0600.
func writeKeyFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secrets.key-*")
	if err != nil {
		return fmt.Errorf("write secrets key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write secrets key file: %w", err)
	}
	return nil
}

// aad binds a ciphertext to its secret and version: a row copied onto
// another secret or version does not open.
func aad(id string, version int64) []byte {
	return []byte("moat-secret\x00" + id + "\x00" + strconv.FormatInt(version, 10))
}

// Seal encrypts value of version of secret id with the current key.
func (k *Keyring) Seal(id string, version int64, value []byte) (store.SecretCipher, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.load(); err != nil {
		return store.SecretCipher{}, err
	}
	aead := k.keys[k.current]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(value)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return store.SecretCipher{}, fmt.Errorf("seal secret: %w", err)
	}
	return store.SecretCipher{KeyID: k.current, Data: aead.Seal(nonce, nonce, value, aad(id, version))}, nil
}

// Open decrypts a version sealed by Seal.
func (k *Keyring) Open(id string, version int64, c store.SecretCipher) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.load(); err != nil {
		return nil, err
	}
	aead, ok := k.keys[c.KeyID]
	if !ok {
		return nil, fmt.Errorf("secret %s version %d: key %s is not in %s", id, version, c.KeyID, k.path)
	}
	if len(c.Data) < aead.NonceSize() {
		return nil, fmt.Errorf("secret %s version %d: ciphertext too short", id, version)
	}
	n := aead.NonceSize()
	out, err := aead.Open(nil, c.Data[:n], c.Data[n:], aad(id, version))
	if err != nil {
		return nil, fmt.Errorf("secret %s version %d: %w", id, version, err)
	}
	return out, nil
}

// Current is the ID of the key new writes use.
func (k *Keyring) Current() (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.load(); err != nil {
		return "", err
	}
	return k.current, nil
}

// AddKey appends a fresh key to the key file and makes it current; the
// older keys stay for reading. It returns the new key's ID.
func (k *Keyring) AddKey() (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.load(); err != nil {
		return "", err
	}
	old, err := os.ReadFile(k.path)
	if err != nil {
		return "", fmt.Errorf("secrets key file: %w", err)
	}
	line, err := newKeyLine()
	if err != nil {
		return "", err
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	if err := writeKeyFile(k.path, append(old, line...)); err != nil {
		return "", err
	}
	k.loaded = false
	if err := k.load(); err != nil {
		return "", err
	}
	return k.current, nil
}
