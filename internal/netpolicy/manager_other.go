//go:build !linux

package netpolicy

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/moatsh/moat/internal/errdefs"
)

// Manager is only implemented on Linux.
type Manager struct{}

var errOS = fmt.Errorf("netpolicy: sandbox networks need Linux: %w", errdefs.ErrNotImplemented)

// New fails outside Linux.
func New(*slog.Logger, ...Option) (*Manager, error) { return nil, errOS }

// Close does nothing outside Linux.
func (*Manager) Close() error { return nil }

// Lookup finds nothing outside Linux.
func (*Manager) Lookup(string) (*Net, bool) { return nil, false }

// Setup fails outside Linux.
func (*Manager) Setup(context.Context, string, bool) (*Net, error) { return nil, errOS }

// Teardown fails outside Linux.
func (*Manager) Teardown(context.Context, string) error { return errOS }

// SetEgress fails outside Linux.
func (*Manager) SetEgress(context.Context, string, Egress) error { return errOS }

// Recover fails outside Linux.
func (*Manager) Recover(context.Context, []string) error { return errOS }

// Explain has nothing to say outside Linux.
func Explain(addr netip.Addr) string { return "" }
