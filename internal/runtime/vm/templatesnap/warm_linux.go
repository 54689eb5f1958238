package templatesnap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
)

// warmCommands are run through envd in a template guest before it is
// snapshotted, so that every restore finds what a first command needs in
// the guest's page cache (the shell, the C library, login profiles)
// instead of reading it through virtio-blk under TCG: the SDKs run
// commands as /bin/bash -l -c as "user", tools as root. A command that
// fails (no bash, no such user) only leaves its files cold.
var warmCommands = []struct {
	user string
	argv []string
}{
	{"root", []string{"/bin/sh", "-c", "true"}},
	{"root", []string{"/bin/bash", "-l", "-c", "true"}},
	{"user", []string{"/bin/bash", "-l", "-c", "true"}},
}

// warmMetaLine marks, in a snapshot's meta, a snapshot taken after
// warmCommands ran. It is part of what names the snapshot, so snapshots
// taken before the warm-up existed are retaken once, and template GC
// counts snapshots without it as stale.
// "warmup 2": the snapshot also waits for the code interpreter's default
// Python context (warmInterpreter).
const warmMetaLine = "warmup 2"

// pythonWarmTimeout bounds the wait for the default Python context (about
// 20 s at boot under TCG on an idle 2-core host).
const pythonWarmTimeout = 3 * time.Minute

// warmGuest runs warmCommands in the guest whose envd listens at addr.
func warmGuest(ctx context.Context, addr string) error {
	var errs []error
	for _, w := range warmCommands {
		if err := guestenvd.Run(ctx, addr, w.user, w.argv); err != nil {
			errs = append(errs, fmt.Errorf("%s as %s: %w", w.argv, w.user, err))
		}
	}
	return errors.Join(errs...)
}

// warmInterpreter waits, in a guest with the Python kernelspec, until envd's
// default Python context is up, so that the snapshot holds a running kernel:
// a clone's first runCode then runs at once instead of after the rest of a
// kernel start under TCG (measured: first runCode 12.4 s; the restored
// guest spent ~20 s of CPU finishing the kernel start). The kernel has not
// run any code yet, so envd still loads the sandbox's env vars into it (and
// reseeds its random module) before the first execution. A guest without
// the kernelspec is not waited for.
func warmInterpreter(ctx context.Context, addr string) error {
	if guestenvd.Run(ctx, addr, "root", []string{"/bin/sh", "-c", "test -e " + guestenvd.PythonKernelSpec}) != nil {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	return guestenvd.WaitPythonContext(ctx, host, pythonWarmTimeout)
}
