package build

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// Runner runs RUN steps inside a build sandbox: a sandbox with the same
// isolation as any other, over the rootfs being built, never on the host.
type Runner interface {
	// Run runs execs in order in one sandbox whose root filesystem is an
	// overlay over rootfs, streams each output line to out, and when all
	// exit 0 writes the sandbox's file changes into rootfs. A command
	// that exits non-zero stops the run with an *ExitError and leaves
	// rootfs unchanged. rootfs shares its files' inodes with cached
	// layers (a hard-link copy): changes replace files (as upper.Apply
	// does), never write into them.
	Run(ctx context.Context, rootfs string, execs []Exec, out func(e Exec, stream, line string)) error
}

// Exec is one RUN step, resolved.
type Exec struct {
	Index   int    // step number (1-based)
	Kind    string // "RUN" or "COPY"
	Label   string // what the log shows for the step
	Cmd     string
	User    string
	Workdir string // "" = the user's home
	Env     map[string]string
}

// ExitError is a RUN step whose command failed.
type ExitError struct {
	Index int
	Kind  string // "RUN" or "COPY"
	Code  int    // -1: killed by a signal
}

func (e *ExitError) Error() string {
	if e.Kind == "COPY" {
		return fmt.Sprintf("step %d (COPY): copying the files failed (exit code %d; see the build log)", e.Index, e.Code)
	}
	return fmt.Sprintf("step %d (%s): the command exited with code %d", e.Index, e.Kind, e.Code)
}

// Unwrap classifies the failure as the request's (shown to the caller).
func (e *ExitError) Unwrap() error { return errdefs.ErrFailedPrecondition }

var errInvalid = errdefs.ErrInvalidArgument

// resolve turns a compiled RUN step into an Exec over the base's config.
func resolve(r RunStep, base store.TemplateConfig) Exec {
	c := over(base, r.Config)
	e := Exec{Index: r.Index, Kind: "RUN", Label: "RUN " + r.Cmd, Cmd: r.Cmd, User: r.User, Workdir: c.Workdir, Env: c.Env}
	if e.User == "" {
		e.User = c.User
	}
	if e.User == "" {
		e.User = "user"
	}
	if e.Workdir == "" {
		switch e.User {
		case "root":
			e.Workdir = "/root"
		case "user":
			e.Workdir = "/home/user"
		}
	}
	return e
}
