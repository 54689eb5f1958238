package templatesnap

import (
	"context"
	"errors"
	"fmt"

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
const warmMetaLine = "warmup 1"

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
