package egress

import (
	"errors"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// OriginalDst returns the destination of a connection redirected by
// netfilter (SO_ORIGINAL_DST), IPv4 only.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var out netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		mr, err := unix.GetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		// struct sockaddr_in: family(2) port(2, big endian) addr(4)
		port := uint16(mr.Multiaddr[2])<<8 | uint16(mr.Multiaddr[3])
		out = netip.AddrPortFrom(netip.AddrFrom4([4]byte{mr.Multiaddr[4], mr.Multiaddr[5], mr.Multiaddr[6], mr.Multiaddr[7]}), port)
	})
	if err == nil {
		err = serr
	}
	return out, err
}
