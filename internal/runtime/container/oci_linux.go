package container

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
)

// hybridMarker lists controllers on the cgroup2 mount of a hybrid host.
const hybridMarker = "/sys/fs/cgroup/unified/cgroup.controllers"

// oci runs an OCI runtime binary (runc or crun) with Moat's state root.
type oci struct {
	name string // "runc" or "crun"
	bin  string
	root string // --root: only Moat's containers live here
	// hideCgroup2 runs the binary in a private mount namespace without the
	// cgroup2 mount (runCmd): crun refuses hybrid hosts otherwise.
	hideCgroup2 bool
	flags       []string // global flags after --root (runsc: platform, network; see gvisor_linux.go)
}

// ociState is the part of `runc state` / `list -f json` we read.
type ociState struct {
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

// pickOCI chooses the OCI runtime: override ("runc"/"crun") if set, else
// crun when it works (on hybrid hosts in a private mount namespace, see startHidden), else runc.
func pickOCI(ctx context.Context, log *slog.Logger, override, root string) (*oci, error) {
	hybrid := isHybrid()
	try := func(name string) (*oci, error) {
		bin, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("%s not found (apt-get install %s): %w", name, name, errdefs.ErrUnavailable)
		}
		o := &oci{name: name, bin: bin, root: root, hideCgroup2: name == "crun" && hybrid}
		if out, err := o.command(ctx, "--version").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s --version: %w: %s", name, err, bytes.TrimSpace(out))
		}
		return o, nil
	}
	switch override {
	case "runc", "crun":
		o, err := try(override)
		if err == nil {
			log.InfoContext(ctx, "OCI runtime chosen", "oci", override, "why", "MOAT_OCI_RUNTIME", "hybrid_cgroups", hybrid)
		}
		return o, err
	case "":
	default:
		return nil, fmt.Errorf("MOAT_OCI_RUNTIME=%q: want runc or crun: %w", override, errdefs.ErrInvalidArgument)
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

// command builds the runtime invocation; the caller sets stdio.
func (o *oci) command(ctx context.Context, args ...string) *exec.Cmd {
	full := append(append([]string{"--root", o.root}, o.flags...), o.renamed(args)...)
	if args[0] == "--version" {
		full = args
	}
	if o.name == "runsc" && args[0] == "run" {
		return o.runscRun(ctx, full) // gvisor_linux.go
	}
	return exec.CommandContext(ctx, o.bin, full...) // started through o.runCmd (hideCgroup2)
}

// run executes a short command and returns its stdout. "does not exist"
// errors come back as ErrNotFound.
func (o *oci) run(ctx context.Context, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := o.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := o.runCmd(cmd); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "does not exist") || strings.Contains(msg, "not found") || strings.Contains(msg, "No such file") {
			return nil, fmt.Errorf("%s %s: %s: %w", o.name, args[0], msg, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("%s %s: %w: %s", o.name, args[0], err, msg)
	}
	return stdout.Bytes(), nil
}

// start runs `run -d` with the runtime's and the container's stdout and
// stderr going to log, never to a pipe: the detached container inherits it,
// and a reader would wait for an EOF that only comes when the sandbox dies.
// log must be a file within the sandbox's own limits (mountLog): root inside
// can take envd's descriptors. Stdin is /dev/null (exec.Cmd's nil Stdin),
// and no other descriptor is passed (Moat's own are close-on-exec, see
// package fdhygiene). The container's host PID is written to pidFile.
func (o *oci) start(ctx context.Context, bundle, name, pidFile string, log *os.File) error {
	cmd := o.command(ctx, "run", "-d", "--pid-file", pidFile, "--bundle", bundle, name)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, log, log
	if err := o.runCmd(cmd); err != nil {
		tail, _ := readTail(log.Name(), 1024)
		return fmt.Errorf("%s run %s: %w: %s", o.name, name, err, tail)
	}
	return nil
}

func (o *oci) state(ctx context.Context, name string) (*ociState, error) {
	out, err := o.run(ctx, "state", name)
	if err != nil {
		return nil, err
	}
	var st ociState
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("%s state %s: %w", o.name, name, err)
	}
	return &st, nil
}

func (o *oci) list(ctx context.Context) ([]ociState, error) {
	if _, err := os.Stat(o.root); os.IsNotExist(err) {
		return nil, nil
	}
	out, err := o.run(ctx, "list", "-f", "json")
	if err != nil {
		return nil, err
	}
	var l []ociState
	if len(bytes.TrimSpace(out)) == 0 || bytes.Equal(bytes.TrimSpace(out), []byte("null")) {
		return nil, nil
	}
	if err := json.Unmarshal(out, &l); err != nil {
		return nil, fmt.Errorf("%s list: %w", o.name, err)
	}
	return l, nil
}

// otherOCIs returns the runtime not chosen, in its default root, so that
// Recover can remove containers a server started with the other one.
func otherOCIs(chosen *oci) []*oci {
	other := map[string]string{"runc": "crun", "crun": "runc"}[chosen.name]
	bin, err := exec.LookPath(other)
	if err != nil {
		return nil
	}
	return []*oci{{name: other, bin: bin, root: filepath.Join(filepath.Dir(chosen.root), other),
		hideCgroup2: other == "crun" && isHybrid()}}
}
