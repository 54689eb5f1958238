package netpolicy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// hostnetsChain is the regular chain, jumped to from forward for every packet
// from a sandbox, that drops traffic to the host's own networks (denyList).
// It is flushed and refilled in one transaction whenever they change.
const hostnetsChain = "hostnets"

// hostnetsDebounce gathers the bursts of address and route events (an
// interface going down removes many at once) into one recomputation.
const hostnetsDebounce = 150 * time.Millisecond

// HostNetworks returns the networks the host is directly connected to (the
// prefix of every address, and the peer of point-to-point addresses, on every
// interface, IPv4 and IPv6) and the gateway of every route as a host prefix.
// A sandbox never reaches any of them; a nameserver inside them is not usable
// from a sandbox.
func HostNetworks() ([]netip.Prefix, error) {
	addrs, routes, err := hostState()
	if err != nil {
		return nil, err
	}
	return denyList(addrs, routes, nil, nil), nil
}

// IsHostNetwork reports whether a lies in HostNetworks. It also reports true
// when the host's networks cannot be read, so that callers fall back to
// something that is surely outside them.
func IsHostNetwork(a netip.Addr) bool {
	ps, err := HostNetworks()
	return err != nil || containsAddr(ps, a)
}

// hostState reads every address and every route (all tables) of the host,
// again when a dump was interrupted by a concurrent change.
func hostState() (addrs []ifAddr, routes []ifRoute, err error) {
	for try := 0; try < 5; try++ {
		if addrs, routes, err = readHostState(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return addrs, routes, err
}

func readHostState() ([]ifAddr, []ifRoute, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, nil, fmt.Errorf("host networks: list links: %w", err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	nas, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, nil, fmt.Errorf("host networks: list addresses: %w", err)
	}
	var addrs []ifAddr
	for _, a := range nas {
		for _, ipn := range []*net.IPNet{a.IPNet, a.Peer} {
			if p, ok := prefixOf(ipn); ok {
				addrs = append(addrs, ifAddr{ifname: names[a.LinkIndex], prefix: p})
			}
		}
	}
	nrs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, nil, fmt.Errorf("host networks: list routes: %w", err)
	}
	var routes []ifRoute
	for _, r := range nrs {
		routes = append(routes, ifRoute{ifname: names[r.LinkIndex], gws: gateways(r.Gw, r.Via)})
		for _, nh := range r.MultiPath {
			routes = append(routes, ifRoute{ifname: names[nh.LinkIndex], gws: gateways(nh.Gw, nh.Via)})
		}
	}
	return addrs, routes, nil
}

// gateways collects a next hop's gateway and its RTA_VIA address.
func gateways(gw net.IP, via netlink.Destination) []netip.Addr {
	var out []netip.Addr
	if a, ok := netip.AddrFromSlice(gw); ok {
		out = append(out, a.Unmap())
	}
	if v, ok := via.(*netlink.Via); ok && v != nil {
		if a, ok := netip.AddrFromSlice(v.Addr); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func prefixOf(ipn *net.IPNet) (netip.Prefix, bool) {
	if ipn == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(ipn.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := ipn.Mask.Size()
	if bits == 0 {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	if a.Is4() && bits == 128 {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones), ones >= 0
}

// computeDeny is denyList for this host, without the scope's own sandbox
// interfaces, plus the operator's prefixes.
func (m *Manager) computeDeny() ([]netip.Prefix, error) {
	addrs, routes, err := hostState()
	if err != nil {
		return nil, err
	}
	return denyList(addrs, routes, m.o.deny, m.isSandboxIf), nil
}

func (m *Manager) isSandboxIf(name string) bool { return strings.HasPrefix(name, m.o.ifPrefix) }

// refreshHostNets recomputes the deny list and, when it changed (or the last
// write failed), replaces the hostnets chain's rules in one transaction.
func (m *Manager) refreshHostNets() error {
	deny, err := m.computeDeny()
	if err != nil {
		return err
	}
	m.nftMu.Lock()
	defer m.nftMu.Unlock()
	if !m.denyDirty && slices.Equal(deny, m.deny) {
		return nil
	}
	m.deny, m.denyDirty = deny, true // a missing table is reinstalled with m.deny
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	ch := &nftables.Chain{Name: hostnetsChain, Table: m.table()}
	c.FlushChain(ch)
	addHostnetsRules(c, m.table(), ch, deny)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: refill chain %s: %w", hostnetsChain, err)
	}
	m.denyDirty = false
	m.log.Info("host networks closed to sandboxes", "table", m.o.table, "prefixes", fmt.Sprint(deny))
	return nil
}

// watchHostNets keeps the hostnets chain current until done is closed: it
// subscribes to address and route changes, recomputes after each burst, and
// subscribes again if the kernel drops a subscription (e.g. on overflow).
func (m *Manager) watchHostNets(done <-chan struct{}) {
	for {
		addrCh, routeCh := make(chan netlink.AddrUpdate, 256), make(chan netlink.RouteUpdate, 256)
		sub := make(chan struct{})
		warn := func(err error) { m.log.Debug("netlink subscription", "err", err) }
		err := netlink.AddrSubscribeWithOptions(addrCh, sub, netlink.AddrSubscribeOptions{ErrorCallback: warn, ReceiveBufferSize: 1 << 20})
		if err == nil {
			err = netlink.RouteSubscribeWithOptions(routeCh, sub, netlink.RouteSubscribeOptions{ErrorCallback: warn, ReceiveBufferSize: 1 << 20})
		}
		if err == nil {
			err = m.watchOnce(done, addrCh, routeCh)
		}
		close(sub)
		go func() { // the library's readers block on full channels: drain until they close
			for range addrCh {
			}
		}()
		go func() {
			for range routeCh {
			}
		}()
		if err == nil {
			return
		}
		m.log.Warn("watching host networks, subscribing again", "err", err)
		select {
		case <-done:
			return
		case <-time.After(time.Second):
		}
	}
}

// watchOnce refreshes once (changes may have happened before the
// subscription), then after each quiet spell following events. It returns nil
// when done is closed and an error when a subscription ended.
func (m *Manager) watchOnce(done <-chan struct{}, addrCh <-chan netlink.AddrUpdate, routeCh <-chan netlink.RouteUpdate) error {
	refresh := func() {
		if err := m.refreshHostNets(); err != nil {
			m.log.Error("updating the sandboxes' host network block list", "err", err)
		}
	}
	refresh()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-done:
			return nil
		case _, ok := <-addrCh:
			if !ok {
				refresh()
				return fmt.Errorf("address subscription closed")
			}
			timer.Reset(hostnetsDebounce)
		case _, ok := <-routeCh:
			if !ok {
				refresh()
				return fmt.Errorf("route subscription closed")
			}
			timer.Reset(hostnetsDebounce)
		case <-timer.C:
			refresh()
		}
	}
}
