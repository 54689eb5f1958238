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

// DefaultHostLock is the host-wide lock of `moat serve`.
const DefaultHostLock = "/run/moat/serve.lock"

// lockDataDir takes an exclusive flock on <dataDir>/serve.lock for the life
// of the process: two servers on one data dir would each remove the other's
// sandboxes as orphans at start (Recover). The kernel drops the lock when
// the process dies, also by SIGKILL.
func lockDataDir(dataDir string) (release func(), err error) {
	path := filepath.Join(dataDir, "serve.lock")
	f, owner, err := flock(path, strconv.Itoa(os.Getpid()))
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, fmt.Errorf("another moat serve (pid %s) is using data dir %s; run one server per data dir", owner, dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// lockHost takes the host-wide lock at path (DefaultHostLock) before any
// host object is touched: netns "moat-<id>", veths "mh…", the nftables
// table "inet moat", cgroups "/moat/<id>" and the OCI state in /run/moat
// are named after sandbox IDs only, so a second server, even with another
// data dir, would find the first one's sandboxes and remove them as
// orphans in Recover. The lock file says who holds it.
func lockHost(path, dataDir string) (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("host lock: %w", err)
	}
	f, owner, err := flock(path, fmt.Sprintf("pid %d, data dir %s", os.Getpid(), dataDir))
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, fmt.Errorf("another moat serve (%s) is running on this host (lock %s): host network, cgroup "+
			"and OCI object names are global, so a second server would remove its sandboxes; run one server per host",
			owner, path)
	}
	if err != nil {
		return nil, fmt.Errorf("host lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// flock opens path and takes an exclusive, non-blocking flock on it, then
// writes who into it. On EWOULDBLOCK, owner is what the holder wrote.
func flock(path, who string) (f *os.File, owner string, err error) {
	f, err = os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, "", err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		return nil, strings.TrimSpace(string(b)), err
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(who+"\n"), 0)
	return f, "", nil
}
