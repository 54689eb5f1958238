// Package randid makes the random IDs of sandboxes, snapshots and
// templates: characters of [a-z0-9], which every host object name and URL
// host label accepts. It exists so that the store, the orchestrator and
// the runtime backends make them one way.
package randid

import "crypto/rand"

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// New is n random characters of [a-z0-9].
func New(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
