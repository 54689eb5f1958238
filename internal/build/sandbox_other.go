//go:build !linux

package build

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
)

// SandboxRunner runs RUN steps in build sandboxes (Linux only).
type SandboxRunner struct{}

// NewSandboxRunner is not available on this platform.
func NewSandboxRunner(runtime.Runtime, int, *slog.Logger) (*SandboxRunner, error) {
	return nil, fmt.Errorf("RUN and COPY steps need Linux: %w", errdefs.ErrNotImplemented)
}

// Run implements Runner.
func (*SandboxRunner) Run(context.Context, string, []Exec, func(Exec, string, string)) error {
	return fmt.Errorf("RUN and COPY steps need Linux: %w", errdefs.ErrNotImplemented)
}
