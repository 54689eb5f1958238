package template

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moatsh/moat/internal/template/rootfs"
)

// EnvdEnv names the environment variable that points at the envd binary;
// cmd/moat reads it as the default of --envd.
const EnvdEnv = "MOAT_ENVD"

// ErrEnvdNotFound means no envd binary was given or found.
var ErrEnvdNotFound = errors.New("envd binary not found")

// FindEnvd returns the envd binary to install: explicit (--envd, or
// $MOAT_ENVD as its default) if set, else "envd" next to the running
// executable.
func FindEnvd(explicit string) (string, error) {
	src := "--envd or " + EnvdEnv
	path := explicit
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("locate envd: %w", err)
		}
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			exe = resolved
		}
		src, path = "next to "+exe, filepath.Join(filepath.Dir(exe), "envd")
	}
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s (%s); build it with `make build` "+
			"(writes bin/envd beside bin/moat), or pass --envd PATH or set %s", ErrEnvdNotFound, path, src, EnvdEnv)
	}
	return filepath.Abs(path)
}

// EnvdSHA256 is the hex sha256 of the envd binary at path.
func EnvdSHA256(path string) (string, error) { return rootfs.FileSHA256(path) }
