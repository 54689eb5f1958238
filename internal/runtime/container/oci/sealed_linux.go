package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// crun and runc defend the host's copy of themselves against a container
// that writes to it through /proc/<pid>/exe (CVE-2019-5736): each run
// first asks whether the binary it runs from is a memfd sealed against
// writes (or, crun, on a read-only mount); when it is not, it makes itself
// one (a copy, or a read-only bind mount of itself: three mount calls in
// the host's namespace) and execs a second time, dynamic loading and all.
// That second start was a third of crun's CPU in a burst of creates here.
// Moat makes the sealed copy once, when it picks the binary, and starts
// every run from it: the same defence, one exec per run.

// sealedFD is the lowest descriptor the sealed copy is moved to: above
// every descriptor a command is given (stdio, ExtraFiles), which exec.Cmd
// puts at 0, 1, 2, 3… in the child before the exec that opens this one.
const sealedFD = 100

// runtimeSeals are the seals crun's and runc's is_self_cloned ask for
// (RUNC_MEMFD_SEALS): no write, no resize, no further sealing.
const runtimeSeals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE

// sealBinary copies the executable at path into a memfd with
// runtimeSeals, close-on-exec, at descriptor sealedFD or above. The
// copy lives as long as the returned file; commands run it by the path
// /proc/self/fd/<n>, which a forked child still has open when it execs.
func sealBinary(name, path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sealed copy of %s: %w", path, err)
	}
	defer src.Close()
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // before Linux 6.3 there is no MFD_EXEC: every memfd may be run
		fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("sealed copy of %s: memfd_create: %w", path, err)
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, sealedFD)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("sealed copy of %s: move the descriptor up: %w", path, err)
	}
	f := os.NewFile(uintptr(high), "memfd:"+name)
	if err := fillAndSeal(f, src); err != nil {
		f.Close()
		return nil, fmt.Errorf("sealed copy of %s: %w", path, err)
	}
	return f, nil
}

// fillAndSeal copies src into the memfd f, makes it executable and seals it.
func fillAndSeal(f *os.File, src *os.File) error {
	if _, err := io.Copy(f, src); err != nil {
		return err
	}
	if err := f.Chmod(0o555); err != nil {
		return err
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, runtimeSeals); err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	return nil
}

// sealedPath is the path a child process execs the sealed copy f by.
func sealedPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// runSealed runs the command for args with run, from the sealed copy when
// there is one. Should the kernel refuse to exec the copy (once in about
// 20,000 creates a crun run failed with "fork/exec /proc/self/fd/100:
// permission denied", cause not found yet), the command has not started:
// it is noted with what the descriptor held, and run again from the
// binary's own file (which copies itself, as without Moat's copy).
func (o *CLI) runSealed(ctx context.Context, args []string, run func(*exec.Cmd) error) error {
	err := run(o.Command(ctx, args...))
	var pe *fs.PathError
	if o.sealed == nil || o.own == "" || !errors.As(err, &pe) || pe.Op != "fork/exec" || pe.Path != o.bin {
		return err
	}
	held, lerr := os.Readlink(o.bin)
	o.log.WarnContext(ctx, "the OCI runtime's sealed copy could not be run; running its own file", "oci", o.Name,
		"args", args[0], "err", err, "descriptor", held, "readlink_err", lerr)
	cmd := o.Command(ctx, args...)
	cmd.Path = o.own
	return run(cmd)
}
