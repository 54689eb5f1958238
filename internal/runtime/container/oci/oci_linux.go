package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
	"golang.org/x/sys/unix"
)

// hybridMarker lists controllers on the cgroup2 mount of a hybrid host.
const hybridMarker = "/sys/fs/cgroup/unified/cgroup.controllers"

// CLI runs an OCI runtime binary (runc, crun or runsc) with Moat's state root.
type CLI struct {
	Name string // "runc", "crun" or "runsc"
	// Root is --root: only Moat's containers live here. It may be set
	// after Pick, before the first command.
	Root string
	bin  string
	// hideCgroup2 runs the binary in a private mount namespace without the
	// cgroup2 mount (RunCmd): crun refuses hybrid hosts otherwise.
	hideCgroup2 bool
	flags       []string // global flags after --root (runsc: platform, network; see runsc_linux.go)
	lean        *leanNS  // nil: containers are created in the usual namespace (lean_linux.go)
	// sealed is the sealed copy bin names (/proc/self/fd/<n>) for crun and
	// runc, nil when they run from their own file (sealed_linux.go); own
	// is then the binary's own file, log where a refused copy is noted.
	sealed *os.File
	own    string
	log    *slog.Logger
}

// State is the part of `runc state` / `list -f json` we read.
type State struct {
	ID     string `json:"id"`
	PID    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

// isHybrid reports whether cgroup v1 and a cgroup2 mount with controllers coexist.
func isHybrid() bool {
	b, err := os.ReadFile(hybridMarker)
	return err == nil && len(bytes.TrimSpace(b)) > 0
}

// Pick chooses the OCI runtime: override ("runc"/"crun") if set, else
// crun when it works (on hybrid hosts in a private mount namespace, see runHidden), else runc.
func Pick(ctx context.Context, log *slog.Logger, override, root string) (*CLI, error) {
	hybrid := isHybrid()
	try := func(name string) (*CLI, error) {
		bin, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("%s not found (apt-get install %s): %w", name, name, errdefs.ErrUnavailable)
		}
		o := &CLI{Name: name, bin: bin, Root: root, hideCgroup2: name == "crun" && hybrid}
		if o.useSealed(ctx, log) {
			return o, nil // its --version ran from the sealed copy
		}
		if out, err := o.Command(ctx, "--version").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s --version: %w: %s", name, err, bytes.TrimSpace(out))
		}
		return o, nil
	}
	switch override {
	case "runc", "crun":
		o, err := try(override)
		if err == nil {
			log.InfoContext(ctx, "OCI runtime chosen", "oci", override, "why", "configured (--oci-runtime, MOAT_OCI_RUNTIME)", "hybrid_cgroups", hybrid)
		}
		return o, err
	case "":
	default:
		return nil, fmt.Errorf("OCI runtime %q: want runc or crun: %w", override, errdefs.ErrInvalidArgument)
	}
	o, crunErr := try("crun")
	if crunErr == nil {
		why := "crun is faster (create, exec, delete)"
		if hybrid {
			why += "; hybrid cgroups: run in a private mount namespace without the cgroup2 mount"
		}
		log.InfoContext(ctx, "OCI runtime chosen", "oci", "crun", "why", why)
		return o, nil
	}
	o, err := try("runc")
	if err != nil {
		return nil, fmt.Errorf("no OCI runtime: crun: %v; runc: %w", crunErr, err)
	}
	log.InfoContext(ctx, "OCI runtime chosen", "oci", "runc", "why", "crun unusable: "+crunErr.Error())
	return o, nil
}

// Command builds the runtime invocation; the caller sets stdio and runs it
// with RunCmd.
func (o *CLI) Command(ctx context.Context, args ...string) *exec.Cmd {
	full := append(append([]string{"--root", o.Root}, o.flags...), o.renamed(args)...)
	if args[0] == "--version" {
		full = args
	}
	if o.Name == "runsc" && args[0] == "run" {
		return o.runscRun(ctx, full) // runsc_linux.go
	}
	cmd := exec.CommandContext(ctx, o.bin, full...) // started through o.RunCmd (hideCgroup2)
	cmd.Args[0] = o.Name                            // not /proc/self/fd/<n> (sealed_linux.go)
	return cmd
}

// useSealed switches o to a sealed copy of its binary (sealed_linux.go)
// when one can be made and its --version runs, and reports whether it did;
// otherwise o keeps its file, and crun or runc copies itself on every run
// as before.
func (o *CLI) useSealed(ctx context.Context, log *slog.Logger) bool {
	f, err := sealBinary(o.Name, o.bin)
	if err == nil {
		s := &CLI{Name: o.Name, bin: sealedPath(f), hideCgroup2: o.hideCgroup2}
		if out, rerr := s.Command(ctx, "--version").CombinedOutput(); rerr != nil {
			f.Close()
			err = fmt.Errorf("run it: %w: %s", rerr, bytes.TrimSpace(out))
		} else {
			o.bin, o.sealed, o.own, o.log = s.bin, f, o.bin, log
		}
	}
	if err != nil {
		log.WarnContext(ctx, "OCI runtime runs from its own file (it copies itself on every run)", "oci", o.Name, "err", err)
		return false
	}
	return true
}

// Run executes a short command and returns its stdout. "does not exist"
// errors come back as ErrNotFound.
func (o *CLI) Run(ctx context.Context, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	err := o.runSealed(ctx, args, func(cmd *exec.Cmd) error {
		stdout.Reset()
		stderr.Reset()
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		return o.RunCmd(cmd)
	})
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "does not exist") || strings.Contains(msg, "not found") || strings.Contains(msg, "No such file") {
			return nil, fmt.Errorf("%s %s: %s: %w", o.Name, args[0], msg, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("%s %s: %w: %s", o.Name, args[0], err, msg)
	}
	return stdout.Bytes(), nil
}

// Start runs `run -d` with the runtime's and the container's stdout and
// stderr going to log, never to a pipe: the detached container inherits it,
// and a reader would wait for an EOF that only comes when the sandbox dies.
// log must be a file within the sandbox's own limits (see package hostfs):
// root inside can take envd's descriptors. Stdin is /dev/null (exec.Cmd's
// nil Stdin), and no other descriptor is passed (Moat's own are
// close-on-exec, see package fdhygiene). The container's host PID is
// written to pidFile. On error the caller adds log's tail.
func (o *CLI) Start(ctx context.Context, bundle, name, pidFile string, log *os.File) error {
	return o.detached(ctx, log, bundle, "run", "-d", "--pid-file", pidFile, "--bundle", bundle, name)
}

// Create is Start's first half (`create`): the container's init is set up
// and waits, in its namespaces and cgroup, for StartCreated before it runs
// the container's process. What Start says of log holds here too: the
// process inherits it when it starts.
func (o *CLI) Create(ctx context.Context, bundle, name, pidFile string, log *os.File) error {
	return o.detached(ctx, log, bundle, "create", "--pid-file", pidFile, "--bundle", bundle, name)
}

// StartCreated runs the process of container name, made by Create. For
// crun it does what `crun start` does for a container without poststart
// hooks or a notify socket (Moat's have neither): open the container's
// exec.fifo for writing, unlink it, write one byte, which releases the
// waiting init into the process's exec. That saves starting crun itself,
// ~4–7 ms here (exec, dynamic linking, and the private mount namespace of
// runHidden), which was most of a create from a slot. A fifo that is
// not there (another crun's protocol) falls back to `start`; an init that
// is gone fails at once (ENXIO: no reader), where `start` would fail too.
// Other runtimes run `start`.
func (o *CLI) StartCreated(ctx context.Context, name string) error {
	if o.Name == "crun" {
		err := releaseExecFifo(filepath.Join(o.Root, name, "exec.fifo"))
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	_, err := o.Run(ctx, "start", name)
	return err
}

// releaseExecFifo is crun's libcrun_status_write_exec_fifo, without
// blocking when nobody reads the fifo.
func releaseExecFifo(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	defer f.Close()
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	if _, err := f.Write([]byte{0}); err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	return nil
}

// detached runs args (a run -d or a create of bundle) with stdout and
// stderr going to log, in a lean namespace when lean mode is on
// (lean_linux.go).
func (o *CLI) detached(ctx context.Context, log *os.File, bundle string, args ...string) error {
	err := o.runSealed(ctx, args, func(cmd *exec.Cmd) error {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, log, log
		if l := o.leanFor(bundle); l != nil {
			return l.run(cmd, bundle)
		}
		return o.RunCmd(cmd)
	})
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", o.Name, args[0], args[len(args)-1], err)
	}
	return nil
}

// State reads the state of the container called name.
func (o *CLI) State(ctx context.Context, name string) (*State, error) {
	out, err := o.Run(ctx, "state", name)
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("%s state %s: %w", o.Name, name, err)
	}
	return &st, nil
}

// List returns every container in the state root (none when it does not exist).
func (o *CLI) List(ctx context.Context) ([]State, error) {
	if _, err := os.Stat(o.Root); os.IsNotExist(err) {
		return nil, nil
	}
	out, err := o.Run(ctx, "list", "-f", "json")
	if err != nil {
		return nil, err
	}
	var l []State
	if len(bytes.TrimSpace(out)) == 0 || bytes.Equal(bytes.TrimSpace(out), []byte("null")) {
		return nil, nil
	}
	if err := json.Unmarshal(out, &l); err != nil {
		return nil, fmt.Errorf("%s list: %w", o.Name, err)
	}
	return l, nil
}

// Others returns the runtime not chosen, in its default root, so that
// Recover can remove containers a server started with the other one.
func Others(chosen *CLI) []*CLI {
	other := map[string]string{"runc": "crun", "crun": "runc"}[chosen.Name]
	bin, err := exec.LookPath(other)
	if err != nil {
		return nil
	}
	return []*CLI{{Name: other, bin: bin, Root: filepath.Join(filepath.Dir(chosen.Root), other),
		hideCgroup2: other == "crun" && isHybrid()}}
}
