//go:build !linux

package hostnet

import (
	"fmt"
	"net/netip"

	"github.com/moatsh/moat/internal/errdefs"
)

var errOS = fmt.Errorf("hostnet: the host's networks are read on Linux only: %w", errdefs.ErrNotImplemented)

// Networks fails outside Linux.
func Networks() ([]netip.Prefix, error) { return nil, errOS }

// Contains reports true outside Linux, where the host's networks cannot be read.
func Contains(netip.Addr) bool { return true }
