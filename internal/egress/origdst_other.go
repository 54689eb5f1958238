//go:build !linux

package egress

import (
	"net"
	"net/netip"

	"github.com/moatsh/moat/internal/errdefs"
)

// OriginalDst is Linux only.
func OriginalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errdefs.ErrNotImplemented
}
