package hostnet

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// debounce gathers the bursts of address and route events (an interface
// going down removes many at once) into one recomputation.
const debounce = 150 * time.Millisecond

// Networks returns the networks the host is directly connected to (the
// prefix of every address, and the peer of point-to-point addresses, on every
// interface, IPv4 and IPv6) and the gateway of every route as a host prefix.
// A sandbox never reaches any of them; a nameserver inside them is not usable
// from a sandbox.
func Networks() ([]netip.Prefix, error) {
	addrs, routes, err := State()
	if err != nil {
		return nil, err
	}
	return DenyList(addrs, routes, nil, nil), nil
}

// Contains reports whether a lies in Networks. It also reports true
// when the host's networks cannot be read, so that callers fall back to
// something that is surely outside them.
func Contains(a netip.Addr) bool {
	ps, err := Networks()
	return err != nil || containsAddr(ps, a)
}

// State reads every address and every route (all tables) of the host,
// again when a dump was interrupted by a concurrent change: up to 8 times,
// 1 ms apart and doubling (~0.25 s in all). Five tries at once all failed
// while 1,000 sandboxes were killed (a link went every ~40 ms, and a dump
// of the links took long enough to overlap one).
func State() (addrs []Addr, routes []Route, err error) {
	delay := time.Millisecond
	for try := 0; try < 8; try++ {
		if addrs, routes, err = readHostState(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
		time.Sleep(delay)
		delay *= 2
	}
	return addrs, routes, err
}

func readHostState() ([]Addr, []Route, error) {
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
	var addrs []Addr
	for _, a := range nas {
		for _, ipn := range []*net.IPNet{a.IPNet, a.Peer} {
			if p, ok := prefixOf(ipn); ok {
				addrs = append(addrs, Addr{Ifname: names[a.LinkIndex], Prefix: p})
			}
		}
	}
	nrs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, nil, fmt.Errorf("host networks: list routes: %w", err)
	}
	var routes []Route
	for _, r := range nrs {
		routes = append(routes, Route{Ifname: names[r.LinkIndex], Gateways: gateways(r.Gw, r.Via)})
		for _, nh := range r.MultiPath {
			routes = append(routes, Route{Ifname: names[nh.LinkIndex], Gateways: gateways(nh.Gw, nh.Via)})
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

// Watch calls refresh once, then after each burst of address and route
// changes of the host, until done is closed; it subscribes again if the
// kernel drops a subscription (e.g. on overflow). log gets the
// subscriptions' troubles.
func Watch(done <-chan struct{}, log *slog.Logger, refresh func()) {
	for {
		addrCh, routeCh := make(chan netlink.AddrUpdate, 256), make(chan netlink.RouteUpdate, 256)
		sub := make(chan struct{})
		warn := func(err error) { log.Debug("netlink subscription", "err", err) }
		err := netlink.AddrSubscribeWithOptions(addrCh, sub, netlink.AddrSubscribeOptions{ErrorCallback: warn, ReceiveBufferSize: 1 << 20})
		if err == nil {
			err = netlink.RouteSubscribeWithOptions(routeCh, sub, netlink.RouteSubscribeOptions{ErrorCallback: warn, ReceiveBufferSize: 1 << 20})
		}
		if err == nil {
			err = watchOnce(done, addrCh, routeCh, refresh)
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
		log.Warn("watching host networks, subscribing again", "err", err)
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
func watchOnce(done <-chan struct{}, addrCh <-chan netlink.AddrUpdate, routeCh <-chan netlink.RouteUpdate, refresh func()) error {
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
			timer.Reset(debounce)
		case _, ok := <-routeCh:
			if !ok {
				refresh()
				return fmt.Errorf("route subscription closed")
			}
			timer.Reset(debounce)
		case <-timer.C:
			refresh()
		}
	}
}
