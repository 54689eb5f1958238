// Package hostnet reads the networks the host itself is connected to (the
// prefix of every address on its interfaces and the gateway of every route,
// IPv4 and IPv6) and follows their changes through netlink. Package
// netpolicy closes them to every sandbox: internet egress means what the
// host routes past its gateways, never its own LANs.
package hostnet

import (
	"net/netip"
	"slices"
)

// Addr is one address of a host interface, with its prefix length.
type Addr struct {
	Ifname string
	Prefix netip.Prefix // address/bits as configured, not masked
}

// Route is one route of the host: the interface it leaves by and every
// gateway it names (single, multipath and RTA_VIA next hops).
type Route struct {
	Ifname   string
	Gateways []netip.Addr
}

// DenyList turns the host's addresses and routes into the destinations a
// sandbox never reaches: the prefix of every address on an interface that is
// not a sandbox's (skip reports those), every gateway of every route as a
// host prefix (/32 or /128, also on-link gateways outside any connected
// prefix), and extra. The result is masked, without duplicates or prefixes
// covered by a broader one, sorted IPv4 first.
func DenyList(addrs []Addr, routes []Route, extra []netip.Prefix, skip func(ifname string) bool) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range addrs {
		if skip != nil && skip(a.Ifname) {
			continue
		}
		out = appendPrefix(out, a.Prefix)
	}
	for _, r := range routes {
		if skip != nil && skip(r.Ifname) {
			continue
		}
		for _, gw := range r.Gateways {
			gw = gw.Unmap().WithZone("")
			if gw.IsValid() && !gw.IsUnspecified() {
				out = appendPrefix(out, netip.PrefixFrom(gw, gw.BitLen()))
			}
		}
	}
	for _, p := range extra {
		out = appendPrefix(out, p)
	}
	return compactPrefixes(out)
}

// appendPrefix appends p masked, with an IPv4-mapped address made IPv4;
// invalid prefixes are dropped.
func appendPrefix(out []netip.Prefix, p netip.Prefix) []netip.Prefix {
	if !p.IsValid() {
		return out
	}
	a, bits := p.Addr().WithZone(""), p.Bits()
	if a.Is4In6() {
		if bits < 96 {
			return out // a v4-mapped prefix wider than the mapped space names IPv6 space: keep as is
		}
		a, bits = a.Unmap(), bits-96
	}
	q, err := a.Prefix(bits)
	if err != nil {
		return out
	}
	return append(out, q)
}

// compactPrefixes sorts ps (IPv4 first, then by address and length), removes
// duplicates and every prefix that a broader one in ps already covers.
func compactPrefixes(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if a.Addr().Is4() != b.Addr().Is4() {
			if a.Addr().Is4() {
				return -1
			}
			return 1
		}
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range ps {
		// Sorted by address, a covering prefix starts at or before p; the last
		// kept one is the only candidate since kept prefixes do not overlap.
		if n := len(out); n > 0 && out[n-1].Addr().BitLen() == p.Addr().BitLen() &&
			out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// containsAddr reports whether any prefix of ps contains a.
func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
