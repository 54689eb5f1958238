package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockDataDir takes an exclusive flock on <dataDir>/serve.lock for the life
// of the process: two servers on one data dir would each remove the other's
// sandboxes as orphans at start (Recover). The kernel drops the lock when
// the process dies, also by SIGKILL.
func lockDataDir(dataDir string) (release func(), err error) {
	path := filepath.Join(dataDir, "serve.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another moat serve (pid %s) is using data dir %s; run one server per data dir",
				strings.TrimSpace(string(owner)), dataDir)
		}
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}
