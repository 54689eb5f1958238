package netpolicy

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/moatsh/moat/internal/netpolicy/firewall"
	"golang.org/x/sys/unix"
)

// Explain describes how the host reaches addr at this moment: the route
// the kernel picks, its device and the device's state, the device's
// neighbour entry for addr, and the firewall's binding of the device to
// addr (firewall.DescribeBinding). It is for the log of a connection to a sandbox
// that failed (a proxy's dial that timed out names only the address, and
// by the time anyone looks the sandbox is gone).
func Explain(addr netip.Addr) string {
	routes, err := netlink.RouteGet(addr.AsSlice())
	switch {
	case err != nil:
		return fmt.Sprintf("no route to %s: %v", addr, err)
	case len(routes) == 0:
		return "no route to " + addr.String()
	}
	r := routes[0]
	link, err := netlink.LinkByIndex(r.LinkIndex)
	if err != nil {
		return fmt.Sprintf("route to %s via device %d, which is gone: %v", addr, r.LinkIndex, err)
	}
	a := link.Attrs()
	var b strings.Builder
	fmt.Fprintf(&b, "route to %s via %s (oper %s", addr, a.Name, a.OperState)
	if a.Flags&net.FlagUp == 0 {
		b.WriteString(", down")
	}
	b.WriteString(")")
	if r.Gw != nil {
		fmt.Fprintf(&b, " gateway %s", r.Gw)
	}
	fmt.Fprintf(&b, ", %s; %s", neighbour(r.LinkIndex, addr), firewall.DescribeBinding(a.Name, addr))
	return b.String()
}

// neighbour describes the neighbour entry for addr on the device with
// index link.
func neighbour(link int, addr netip.Addr) string {
	family := unix.AF_INET
	if addr.Is6() {
		family = unix.AF_INET6
	}
	neighs, err := netlink.NeighList(link, family)
	if err != nil {
		return fmt.Sprintf("neighbours unreadable: %v", err)
	}
	for _, n := range neighs {
		if n.IP.Equal(addr.AsSlice()) {
			return fmt.Sprintf("neighbour %s %s", neighState(n.State), n.HardwareAddr)
		}
	}
	return "no neighbour entry"
}

// neighState names a neighbour's NUD state (rtnetlink(7)).
func neighState(s int) string {
	names := []struct {
		bit  int
		name string
	}{{unix.NUD_INCOMPLETE, "incomplete"}, {unix.NUD_REACHABLE, "reachable"}, {unix.NUD_STALE, "stale"},
		{unix.NUD_DELAY, "delay"}, {unix.NUD_PROBE, "probe"}, {unix.NUD_FAILED, "failed"},
		{unix.NUD_NOARP, "noarp"}, {unix.NUD_PERMANENT, "permanent"}}
	var out []string
	for _, n := range names {
		if s&n.bit != 0 {
			out = append(out, n.name)
		}
	}
	if len(out) == 0 {
		return fmt.Sprintf("state %#x", s)
	}
	return strings.Join(out, "|")
}
