//go:build !linux

package reaper

// Supported reports false: only Linux has pidfds.
func Supported() bool { return false }

// Start does nothing outside Linux.
func Start() {}

// Reap does nothing outside Linux.
func Reap() int { return 0 }
