package secrets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// Limits of what a secret may hold (E2B's for names and metadata).
const (
	MaxNameLen        = 128
	MaxValueBytes     = 64 << 10
	MaxMetadata       = 32
	MaxMetaKeyBytes   = 128
	MaxMetaValueBytes = 1024
	MaxMetaBytes      = 8192
)

// Store is the persistence of secrets (*store.DB; internal/storetest
// checks an implementation): records of one team only, another team's is
// errdefs.ErrNotFound; a taken name errdefs.ErrAlreadyExists; idOrName is
// a secret ID (sec_...) or a name in any case.
type Store interface {
	// CreateSecret stores s with version 1 sealed by seal.
	CreateSecret(ctx context.Context, s store.Secret, seal store.SealFunc) (store.Secret, error)
	// UpdateSecret appends a version sealed by seal and makes it current;
	// a nil metadata keeps the stored one.
	UpdateSecret(ctx context.Context, team, idOrName string, metadata map[string]string, now time.Time,
		seal store.SealFunc) (store.Secret, error)
	// GetSecret returns one secret without its value.
	GetSecret(ctx context.Context, team, idOrName string) (store.Secret, error)
	// ListSecrets returns up to limit secrets by name, after name after.
	ListSecrets(ctx context.Context, team, after string, limit int) ([]store.Secret, error)
	// DeleteSecret removes a secret and all its versions.
	DeleteSecret(ctx context.Context, team, idOrName string) error
	// SecretValue returns a secret and its current version's sealed value.
	SecretValue(ctx context.Context, team, idOrName string) (store.Secret, store.SecretCipher, error)
}

// Service is the secrets API's logic: it validates input, seals values
// and never returns them.
type Service struct {
	db   Store
	keys *Keyring
}

// NewService returns a Service over db with the keys of keys.
func NewService(db Store, keys *Keyring) *Service { return &Service{db: db, keys: keys} }

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// CanonicalName checks a secret name (1..128 of a-z, A-Z, 0-9, '_', '-',
// not starting with sec_) and returns it lower-cased, the form stored and
// returned; errdefs.ErrInvalidArgument otherwise.
func CanonicalName(name string) (string, error) {
	if len(name) == 0 || len(name) > MaxNameLen || !nameRE.MatchString(name) {
		return "", errdefs.Publicf(errdefs.ErrInvalidArgument,
			"invalid secret name %q: want 1 to %d characters of a-z, A-Z, 0-9, '_' and '-'", name, MaxNameLen)
	}
	c := strings.ToLower(name)
	if strings.HasPrefix(c, store.SecretIDPrefix) {
		return "", errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid secret name %q: the %s prefix is reserved for secret IDs",
			name, store.SecretIDPrefix)
	}
	return c, nil
}

// checkValue refuses an empty or oversize value. The error never quotes
// the value.
func checkValue(value string) error {
	switch {
	case value == "":
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "secret value must not be empty")
	case len(value) > MaxValueBytes:
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "secret value is %d bytes: the limit is %d", len(value), MaxValueBytes)
	}
	return nil
}

// CheckMetadata enforces E2B's metadata limits.
func CheckMetadata(md map[string]string) error {
	if len(md) > MaxMetadata {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "secret metadata has %d entries: the limit is %d", len(md), MaxMetadata)
	}
	total := 0
	for k, v := range md {
		if k == "" || len(k) > MaxMetaKeyBytes {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "secret metadata key %q: want 1 to %d bytes", k, MaxMetaKeyBytes)
		}
		if len(v) > MaxMetaValueBytes {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "secret metadata value of %q is %d bytes: the limit is %d",
				k, len(v), MaxMetaValueBytes)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetaBytes {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "secret metadata is %d bytes: the limit is %d", total, MaxMetaBytes)
	}
	return nil
}

func newID() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("secret ID: %w", err)
	}
	return store.SecretIDPrefix + hex.EncodeToString(b), nil
}

func (s *Service) seal(value string) store.SealFunc {
	return func(id string, version int64) (store.SecretCipher, error) {
		return s.keys.Seal(id, version, []byte(value))
	}
}

// Create stores a new secret of team with its first value.
func (s *Service) Create(ctx context.Context, team, name, value string, metadata map[string]string) (store.Secret, error) {
	canon, err := CanonicalName(name)
	if err != nil {
		return store.Secret{}, err
	}
	if err := checkValue(value); err != nil {
		return store.Secret{}, err
	}
	if err := CheckMetadata(metadata); err != nil {
		return store.Secret{}, err
	}
	id, err := newID()
	if err != nil {
		return store.Secret{}, err
	}
	return s.db.CreateSecret(ctx, store.Secret{ID: id, Team: team, Name: canon, Metadata: metadata,
		CreatedAt: time.Now().UTC()}, s.seal(value))
}

// Update stores value as the secret's new version; metadata replaces the
// stored one unless nil.
func (s *Service) Update(ctx context.Context, team, idOrName, value string, metadata map[string]string) (store.Secret, error) {
	if err := checkValue(value); err != nil {
		return store.Secret{}, err
	}
	if err := CheckMetadata(metadata); err != nil {
		return store.Secret{}, err
	}
	return s.db.UpdateSecret(ctx, team, idOrName, metadata, time.Now(), s.seal(value))
}

// Get returns a secret's metadata.
func (s *Service) Get(ctx context.Context, team, idOrName string) (store.Secret, error) {
	return s.db.GetSecret(ctx, team, idOrName)
}

// List returns up to limit secrets of team by name, after name after.
func (s *Service) List(ctx context.Context, team, after string, limit int) ([]store.Secret, error) {
	return s.db.ListSecrets(ctx, team, after, limit)
}

// Delete removes a secret and every version of its value.
func (s *Service) Delete(ctx context.Context, team, idOrName string) error {
	return s.db.DeleteSecret(ctx, team, idOrName)
}

// Value decrypts the current value of team's secret, for the egress proxy
// only: it must never reach an API response or a log.
func (s *Service) Value(ctx context.Context, team, idOrName string) ([]byte, error) {
	sec, c, err := s.db.SecretValue(ctx, team, idOrName)
	if err != nil {
		return nil, err
	}
	return s.keys.Open(sec.ID, sec.CurrentVersion, c)
}

// Resealer is the store side of a key rotation (*store.DB).
type Resealer interface {
	ResealSecrets(ctx context.Context, reseal store.ResealFunc) (int, error)
}

// Rotate adds a key to keys, makes it current and re-encrypts every stored
// version with it (one transaction): afterwards the older keys are needed
// by nothing and may be deleted from the key file. It returns the new
// key's ID and how many versions it re-encrypted. Run it with the server
// stopped: a running server keeps the keys it loaded.
func Rotate(ctx context.Context, db Resealer, keys *Keyring) (string, int, error) {
	id, err := keys.AddKey()
	if err != nil {
		return "", 0, err
	}
	n, err := db.ResealSecrets(ctx, func(sid string, version int64, c store.SecretCipher) (store.SecretCipher, error) {
		if c.KeyID == id {
			return c, nil
		}
		v, err := keys.Open(sid, version, c)
		if err != nil {
			return store.SecretCipher{}, err
		}
		return keys.Seal(sid, version, v)
	})
	if err != nil {
		return id, 0, fmt.Errorf("rotate secrets key: %w", err)
	}
	return id, n, nil
}
