package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/qmp"
)

// A jailed QEMU can create entries in its sandbox directory, so it could
// replace its sockets with symlinks to another sandbox's. Moat therefore
// connects through an O_PATH descriptor of the socket itself, opened
// without following a symlink.

// sockRef opens the unix socket at path (not a symlink) and returns a
// /proc/self/fd path naming exactly it, and the function releasing it.
func sockRef(path string) (string, func(), error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return "", nil, fmt.Errorf("%s: not a unix socket", path)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd), func() { unix.Close(fd) }, nil
}

// DialQMPIn connects to the QMP socket (qmp.sock) of the QEMU of sandbox
// directory dir, waiting at most timeout for it.
func DialQMPIn(ctx context.Context, dir string, timeout time.Duration) (*qmp.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return DialQMP(ctx, filepath.Join(dir, "qmp.sock"))
}

// DialQMP connects to the QMP socket at path, waiting for QEMU to create
// it until ctx ends.
func DialQMP(ctx context.Context, path string) (*qmp.Client, error) {
	for {
		ref, release, err := sockRef(path)
		if err == nil {
			c, err := qmp.Dial(ctx, ref)
			release()
			if err != nil {
				return nil, fmt.Errorf("qmp %s: %w", path, err)
			}
			return c, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if serr := Sleep(ctx, 5*time.Millisecond); serr != nil {
			return nil, fmt.Errorf("qmp: %w (%v)", serr, err)
		}
	}
}
