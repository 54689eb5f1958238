// Package fsmark is the marker file of a filesystem-only pause (E2B's
// pause with memory: false), shared by the backends that can do one. A
// backend writes it, synced, into the sandbox's directory before it stops
// anything, and removes it once the sandbox runs again: Recover then
// adopts a marked sandbox as paused to its files whatever state a crash
// left it in.
package fsmark

import (
	"errors"
	"os"
	"path/filepath"
)

// File is the marker's name in a sandbox directory.
const File = "paused-filesystem"

// Write creates dir's marker and syncs it and dir.
func Write(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, File), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// Present reports whether sandbox directory dir carries the marker.
func Present(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, File))
	return err == nil
}

// Remove removes dir's marker; a missing one is no error.
func Remove(dir string) error {
	if err := os.Remove(filepath.Join(dir, File)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
