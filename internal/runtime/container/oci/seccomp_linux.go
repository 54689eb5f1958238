package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// SeccompBPFAnnotation carries a compiled seccomp filter (base64 of the
// BPF program) in a bundle's config.json. crun loads it instead of
// compiling linux.seccomp with libseccomp, which costs ~2.5 ms per start.
const SeccompBPFAnnotation = "run.oci.seccomp_bpf_data"

// CompileSeccomp returns the BPF program crun compiles for profile (crun
// only). It creates a throwaway container in a temporary state root that
// nothing else lists (not under /run/moat, no cgroup: --cgroup-manager=disabled),
// reads the filter crun writes to <root>/<id>/seccomp.bpf, and deletes the
// container. Its bundle is an empty read-only rootfs with an empty
// executable /init, which is never run: `create` only checks it exists.
func (o *CLI) CompileSeccomp(ctx context.Context, profile *specs.LinuxSeccomp) (_ []byte, err error) {
	if o.Name != "crun" {
		return nil, fmt.Errorf("compile seccomp: %s cannot (crun only)", o.Name)
	}
	tmp, err := os.MkdirTemp("", "moat-seccomp-")
	if err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tmp)) }()
	bundle, rootfs := filepath.Join(tmp, "bundle"), filepath.Join(tmp, "bundle", "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "dev"), 0o755); err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "init"), nil, 0o755); err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	spec := specs.Spec{
		Version: "1.0.2", // crun 1.8 refuses newer
		Root:    &specs.Root{Path: "rootfs", Readonly: true},
		Process: &specs.Process{Args: []string{"/init"}, Cwd: "/"},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.MountNamespace}},
			Seccomp:    profile,
		},
	}
	// crun wants a "mounts" key, which omitempty drops when empty.
	b, err := json.Marshal(struct {
		specs.Spec
		Mounts []specs.Mount `json:"mounts"`
	}{spec, []specs.Mount{}})
	if err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	c := *o // the same binary (sealed copy and fallback too), its own state root, no cgroups, no lean namespace
	c.Root, c.flags, c.lean = filepath.Join(tmp, "state"), []string{"--cgroup-manager=disabled"}, nil
	id := "moat-seccomp-" + strconv.Itoa(os.Getpid())
	if err := c.create(ctx, bundle, id, filepath.Join(tmp, "create.log")); err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	bpf, readErr := os.ReadFile(filepath.Join(c.Root, id, "seccomp.bpf"))
	// Kill first: with --cgroup-manager=disabled, `delete -f` of a created
	// container removes its state but leaves its init process waiting.
	if _, err := c.Run(context.WithoutCancel(ctx), "kill", id, "KILL"); err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	if _, err := c.Run(context.WithoutCancel(ctx), "delete", "-f", id); err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	if readErr != nil {
		return nil, fmt.Errorf("compile seccomp: %w", readErr)
	}
	if len(bpf) == 0 || len(bpf)%8 != 0 {
		return nil, fmt.Errorf("compile seccomp: %d bytes is no BPF program", len(bpf))
	}
	return bpf, nil
}

// create runs `create` with the container's stdio on /dev/null and crun's
// stderr in logPath: a pipe would be held open by the container's init,
// and the command's Wait would not return before it dies.
func (o *CLI) create(ctx context.Context, bundle, id, logPath string) error {
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	err = o.runSealed(ctx, []string{"create", "--bundle", bundle, id}, func(cmd *exec.Cmd) error {
		cmd.Stderr = log
		return o.RunCmd(cmd)
	})
	if err != nil {
		msg, _ := os.ReadFile(logPath)
		return fmt.Errorf("%s create: %w: %s", o.Name, err, bytes.TrimSpace(msg))
	}
	return nil
}
