package store

import "github.com/moatsh/moat/internal/store/secretstore"

// The secrets table lives in secretstore; DB embeds it (CreateSecret,
// GetSecret, UpdateSecret, ListSecrets, DeleteSecret, SecretValue,
// ResealSecrets) and these names keep its types where callers look.
type (
	// Secret is a team's named secret without its value.
	Secret = secretstore.Secret
	// SecretCipher is one encrypted version of a secret's value.
	SecretCipher = secretstore.Cipher
	// SealFunc encrypts the value of a version of a secret.
	SealFunc = secretstore.SealFunc
	// ResealFunc re-encrypts one version's value (key rotation).
	ResealFunc = secretstore.ResealFunc
)

// SecretIDPrefix starts every secret ID; names may not start with it.
const SecretIDPrefix = secretstore.IDPrefix
