package container

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatsh/moat/internal/runtime/container/oci"
)

// BareRun times one foreground `run` of args in rootfsDir (read-only, no
// overlay, no cgroup limits, no seccomp, a fresh empty netns) with the OCI
// runtime the container backend picks (crun or runc; ociName forces one, as
// Settings.OCIRuntime does): the floor any container
// create→first-command path is measured against. It needs root; the bundle
// and state live in a temporary directory removed after.
func BareRun(ctx context.Context, ociName, rootfsDir string, args ...string) (time.Duration, error) {
	abs, err := filepath.Abs(rootfsDir)
	if err != nil {
		return 0, fmt.Errorf("bare run: %w", err)
	}
	tmp, err := os.MkdirTemp("", "moat-bare-")
	if err != nil {
		return 0, fmt.Errorf("bare run: %w", err)
	}
	defer os.RemoveAll(tmp)
	spec := &specs.Spec{
		Version: ociVersion,
		Root:    &specs.Root{Path: abs, Readonly: true},
		Process: &specs.Process{
			Args: args, Cwd: "/", Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			Capabilities: &specs.LinuxCapabilities{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps},
		},
		Hostname: "bare",
		Mounts:   defaultMounts(""),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.MountNamespace}, {Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.NetworkNamespace},
			},
		},
	}
	if err := writeJSON(filepath.Join(tmp, "config.json"), spec); err != nil {
		return 0, fmt.Errorf("bare run: %w", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	var out strings.Builder
	o, err := oci.Pick(ctx, slog.New(slog.DiscardHandler), ociName, filepath.Join(tmp, "state"))
	if err != nil {
		return 0, fmt.Errorf("bare run: %w", err)
	}
	cmd := o.Command(ctx, "run", "--bundle", tmp, "bare-"+hex.EncodeToString(b))
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = o.RunCmd(cmd)
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("bare run %v: %w: %s", args, err, strings.TrimSpace(out.String()))
	}
	return d, nil
}
