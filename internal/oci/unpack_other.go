//go:build !linux

package oci

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/errdefs"
)

// Unpack needs Linux (openat2); see unpack_linux.go.
func Unpack(context.Context, []Layer, string, ...UnpackOpt) (UnpackStats, error) {
	return UnpackStats{}, fmt.Errorf("unpack image layers: %w", errdefs.ErrNotImplemented)
}
