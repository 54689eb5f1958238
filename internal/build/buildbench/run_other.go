//go:build !linux

package buildbench

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/errdefs"
)

// Run needs Linux (the container runtime).
func Run(context.Context, Config) (Report, error) {
	return Report{}, fmt.Errorf("template build bench: needs Linux: %w", errdefs.ErrNotImplemented)
}
