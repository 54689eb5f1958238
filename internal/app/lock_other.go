//go:build !linux

package app

// lockDataDir is a no-op where flock is not used (moat serve needs Linux).
func lockDataDir(string) (func(), error) { return func() {}, nil }
