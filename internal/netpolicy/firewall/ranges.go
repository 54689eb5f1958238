package firewall

import (
	"net/netip"
	"slices"
)

// The interval sets of the egress policy hold disjoint ranges: these turn
// lists of prefixes into them, by family.

// ipv4Range is an inclusive range of IPv4 addresses.
type ipv4Range struct{ from, to uint32 }

func v4(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func v4Addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// mergeV4 turns the IPv4 prefixes of ps into sorted, disjoint, non-adjacent
// ranges: the elements of an interval set may not overlap. IPv6 prefixes
// are dropped.
func mergeV4(ps []netip.Prefix) []ipv4Range {
	var rs []ipv4Range
	for _, p := range ps {
		if !p.Addr().Is4() {
			continue
		}
		p = p.Masked()
		from := v4(p.Addr())
		to := from | uint32((uint64(1)<<(32-p.Bits()))-1)
		rs = append(rs, ipv4Range{from, to})
	}
	slices.SortFunc(rs, func(a, b ipv4Range) int {
		switch {
		case a.from < b.from:
			return -1
		case a.from > b.from:
			return 1
		}
		return 0
	})
	var out []ipv4Range
	for _, r := range rs {
		if n := len(out); n > 0 && (r.from <= out[n-1].to || out[n-1].to != ^uint32(0) && r.from == out[n-1].to+1) {
			out[n-1].to = max(out[n-1].to, r.to)
			continue
		}
		out = append(out, r)
	}
	return out
}

// addrRange is an inclusive range of addresses of one family.
type addrRange struct{ from, to netip.Addr }

func v4Ranges(rs []ipv4Range) []addrRange {
	out := make([]addrRange, 0, len(rs))
	for _, r := range rs {
		out = append(out, addrRange{v4Addr(r.from), v4Addr(r.to)})
	}
	return out
}

// mergeV6 turns the IPv6 prefixes of ps into sorted, disjoint,
// non-adjacent ranges, as mergeV4 does for IPv4. IPv4 prefixes are
// dropped.
func mergeV6(ps []netip.Prefix) []addrRange {
	var rs []addrRange
	for _, p := range ps {
		if !p.Addr().Is6() || p.Addr().Is4In6() {
			continue
		}
		p = p.Masked()
		last := p.Addr().As16()
		for i := p.Bits(); i < 128; i++ {
			last[i/8] |= 0x80 >> (i % 8)
		}
		rs = append(rs, addrRange{p.Addr(), netip.AddrFrom16(last)})
	}
	slices.SortFunc(rs, func(a, b addrRange) int { return a.from.Compare(b.from) })
	var out []addrRange
	for _, r := range rs {
		if n := len(out); n > 0 && (r.from.Compare(out[n-1].to) <= 0 || out[n-1].to.Next() == r.from) {
			if r.to.Compare(out[n-1].to) > 0 {
				out[n-1].to = r.to
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// denyAllV6 is what a denyOut holding 0.0.0.0/0 also denies: E2B's
// "deny all traffic" covers IPv6 too.
var denyAllV6 = netip.MustParsePrefix("::/0")

// withDenyAllV6 returns deny, plus ::/0 when it holds 0.0.0.0/0.
func withDenyAllV6(deny []netip.Prefix) []netip.Prefix {
	for _, p := range deny {
		if p.Addr().Is4() && p.Bits() == 0 {
			return append(slices.Clone(deny), denyAllV6)
		}
	}
	return deny
}

// mergePrefixes returns the fewest prefixes that cover exactly what ps
// covers (IPv4 first, then IPv6): adjacent and overlapping prefixes are
// joined. The hostnets chain has a rule per prefix, and a host routing to
// a thousand sandboxes of another server has a thousand adjacent /30s,
// which as rules overflow a netlink message ("message too long").
func mergePrefixes(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range append(v4Ranges(mergeV4(ps)), mergeV6(ps)...) {
		out = append(out, rangePrefixes(r.from, r.to)...)
	}
	return out
}

// rangePrefixes splits the inclusive range from..to (one family) into
// the fewest prefixes: at each step the largest aligned block that starts
// at from and ends within to.
func rangePrefixes(from, to netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	bits := from.BitLen()
	for {
		b := bits
		for b > 0 {
			p := netip.PrefixFrom(from, b-1).Masked()
			if p.Addr() != from || lastAddr(p).Compare(to) > 0 {
				break
			}
			b--
		}
		p := netip.PrefixFrom(from, b)
		out = append(out, p)
		last := lastAddr(p)
		if last.Compare(to) >= 0 || !last.Next().IsValid() {
			return out
		}
		from = last.Next()
	}
}

// lastAddr is the last address of prefix p.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(a)*8; i++ {
		a[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(a)
	return last
}
