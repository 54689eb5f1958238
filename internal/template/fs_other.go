//go:build !linux

package template

import "os"

// swapDirs moves src to dst; see fs_linux.go. Elsewhere the replacement is
// two renames and not atomic.
func swapDirs(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		old := dst + ".old"
		if err := os.Rename(dst, old); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		return os.Rename(old, src)
	}
	return os.Rename(src, dst)
}

func removeTree(dir string) error { return os.RemoveAll(dir) }

func lockFile(string) (func(), error) { return func() {}, nil }

func inUseAsLowerdir(string) (bool, error) { return false, nil }
func isMountRoot(string) (bool, error)     { return false, nil }
