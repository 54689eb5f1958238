//go:build !linux

package runtime

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/errdefs"
)

// Process is a host process watched for its exit; Linux only.
type Process struct{ pid int }

// OpenProcess answers errdefs.ErrNotImplemented off Linux.
func OpenProcess(pid int) (*Process, error) {
	return nil, fmt.Errorf("pidfd: %w", errdefs.ErrNotImplemented)
}

// PID is the process's ID.
func (p *Process) PID() int { return p.pid }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool { return true }

// Wait returns at once off Linux.
func (p *Process) Wait(ctx context.Context) error { return nil }

// Close does nothing off Linux.
func (p *Process) Close() error { return nil }

// Kill does nothing off Linux.
func (p *Process) Kill() error { return nil }
