//go:build !linux

package app

// lockDataDir is a no-op where flock is not used (moat serve needs Linux).
func lockDataDir(string) (func(), error) { return func() {}, nil }

// DefaultHostLock is the host-wide lock of `moat serve` on Linux.
const DefaultHostLock = "/run/moat/serve.lock"

// lockHost is a no-op where flock is not used.
func lockHost(string, string) (func(), error) { return func() {}, nil }
