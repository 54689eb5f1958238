package firewall

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestMergeV4(t *testing.T) {
	got := mergeV4(pfx("10.0.0.0/24", "10.0.0.128/25", "10.0.1.0/24", "10.0.3.0/24", "2001:db8::/32", "0.0.0.0/0"))
	if len(got) != 1 || got[0] != (ipv4Range{0, ^uint32(0)}) {
		t.Fatalf("with /0: %v", got)
	}
	got = mergeV4(pfx("10.0.3.0/24", "10.0.0.128/25", "10.0.0.0/24", "10.0.1.0/24", "255.255.255.255/32"))
	want := []ipv4Range{{v4(v4Addr(0x0a000000)), 0x0a0001ff}, {0x0a000300, 0x0a0003ff}, {0xffffffff, 0xffffffff}}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%v, want %v", got, want)
		}
	}
}

func TestMergeV6(t *testing.T) {
	r := func(a, b string) addrRange { return addrRange{netip.MustParseAddr(a), netip.MustParseAddr(b)} }
	tests := []struct {
		name string
		in   []netip.Prefix
		want []addrRange
	}{
		{"IPv4 dropped", pfx("10.0.0.0/8", "2001:db8::1/128"), []addrRange{r("2001:db8::1", "2001:db8::1")}},
		{"all", pfx("2001:db8::/32", "::/0"), []addrRange{r("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}},
		{"adjacent and overlapping", pfx("2001:db8:1::/48", "2001:db8::/48", "2001:db8:0:1::/64", "2001:db8:3::/48"),
			[]addrRange{r("2001:db8::", "2001:db8:1:ffff:ffff:ffff:ffff:ffff"), r("2001:db8:3::", "2001:db8:3:ffff:ffff:ffff:ffff:ffff")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeV6(tc.in); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
	if got := withDenyAllV6(pfx("0.0.0.0/0")); len(got) != 2 || got[1] != denyAllV6 {
		t.Errorf("deny 0.0.0.0/0 does not deny IPv6: %v", got)
	}
	if got := withDenyAllV6(pfx("0.0.0.0/1", "128.0.0.0/1")); len(got) != 2 {
		t.Errorf("a narrower IPv4 deny changed: %v", got)
	}
}

func TestMergePrefixes(t *testing.T) {
	pp := pfx
	var thousand []netip.Prefix // 1024 adjacent /30s: 10.200.0.0/20
	for i := range 1024 {
		thousand = append(thousand, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 200, byte(i >> 6), byte(i&63) << 2}), 30))
	}
	for _, tc := range []struct {
		name string
		in   []netip.Prefix
		want []netip.Prefix
	}{
		{"a thousand adjacent /30s are one /20", thousand, pp("10.200.0.0/20")},
		{"disjoint stay apart", pp("10.0.0.0/8", "192.168.1.0/24"), pp("10.0.0.0/8", "192.168.1.0/24")},
		{"contained goes", pp("10.0.0.0/8", "10.1.2.0/24"), pp("10.0.0.0/8")},
		{"unaligned run splits exactly", pp("10.0.0.4/30", "10.0.0.8/29", "10.0.0.16/30"), pp("10.0.0.4/30", "10.0.0.8/29", "10.0.0.16/30")},
		{"two halves join", pp("10.0.0.0/25", "10.0.0.128/25"), pp("10.0.0.0/24")},
		{"IPv6 too", pp("fd00::/65", "fd00::8000:0:0:0/65", "::1/128"), pp("::1/128", "fd00::/64")},
		{"everything", pp("0.0.0.0/1", "128.0.0.0/1"), pp("0.0.0.0/0")},
	} {
		got := mergePrefixes(tc.in)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
