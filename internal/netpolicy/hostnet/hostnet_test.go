package hostnet

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestDenyList(t *testing.T) {
	sandbox := func(name string) bool { return strings.HasPrefix(name, "mh") }
	tests := []struct {
		name   string
		addrs  []Addr
		routes []Route
		extra  []netip.Prefix
		want   []netip.Prefix
	}{
		{name: "nothing"},
		{name: "connected prefixes masked, both families",
			addrs: []Addr{{"eth0", netip.MustParsePrefix("192.0.2.2/24")}, {"eth0", netip.MustParsePrefix("fd00::2/64")},
				{"lo", netip.MustParsePrefix("127.0.0.1/8")}, {"lo", netip.MustParsePrefix("::1/128")}},
			want: pfx("127.0.0.0/8", "192.0.2.0/24", "::1/128", "fd00::/64")},
		{name: "sandbox interfaces skipped",
			addrs: []Addr{{"mhabc", netip.MustParsePrefix("10.200.0.1/30")}, {"eth0", netip.MustParsePrefix("203.0.113.2/24")}},
			want:  pfx("203.0.113.0/24")},
		{name: "gateways, also on-link outside any prefix and IPv6",
			addrs: []Addr{{"eth0", netip.MustParsePrefix("198.51.100.7/32")}},
			routes: []Route{{"eth0", []netip.Addr{addr("172.31.1.1")}}, {"eth0", []netip.Addr{addr("fe80::1%eth0")}},
				{"eth0", nil}, {"mhx", []netip.Addr{addr("10.200.0.1")}}},
			want: pfx("172.31.1.1/32", "198.51.100.7/32", "fe80::1/128")},
		{name: "multipath and via, v4-mapped unmapped",
			routes: []Route{{"eth1", []netip.Addr{addr("::ffff:192.0.2.9"), addr("2001:db8::1")}}, {"eth2", []netip.Addr{netip.IPv4Unspecified()}}},
			want:   pfx("192.0.2.9/32", "2001:db8::1/128")},
		{name: "covered and duplicate prefixes dropped",
			addrs:  []Addr{{"eth0", netip.MustParsePrefix("203.0.113.2/24")}, {"eth1", netip.MustParsePrefix("203.0.113.9/24")}},
			routes: []Route{{"eth0", []netip.Addr{addr("203.0.113.1")}}},
			extra:  pfx("203.0.0.0/16", "2001:db8::/32", "2001:db8:1::/48"),
			want:   pfx("203.0.0.0/16", "2001:db8::/32")},
		{name: "operator prefixes masked",
			extra: pfx("100.100.1.1/16", "::ffff:198.18.0.1/111"),
			want:  pfx("100.100.0.0/16", "198.18.0.0/15")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DenyList(tc.addrs, tc.routes, tc.extra, sandbox)
			if !slices.Equal(got, tc.want) {
				t.Errorf("DenyList = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestContainsAddr(t *testing.T) {
	ps := pfx("192.0.2.0/24", "fd00::/64")
	for _, tc := range []struct {
		a    string
		want bool
	}{{"192.0.2.1", true}, {"::ffff:192.0.2.1", true}, {"192.0.3.1", false}, {"fd00::53", true}, {"fd01::53", false}} {
		if got := containsAddr(ps, addr(tc.a)); got != tc.want {
			t.Errorf("containsAddr(%s) = %v, want %v", tc.a, got, tc.want)
		}
	}
}

// FuzzCompactPrefixes checks that compacting keeps exactly the addresses of
// its input: every input prefix is covered by one output prefix, every output
// prefix is one of the inputs, and no two outputs overlap.
func FuzzCompactPrefixes(f *testing.F) {
	f.Add([]byte{192, 0, 2, 0, 24, 192, 0, 2, 1, 32, 10, 0, 0, 0, 8})
	f.Add([]byte{0, 0, 0, 0, 0, 255, 255, 255, 255, 32})
	f.Fuzz(func(t *testing.T, b []byte) {
		var in []netip.Prefix
		for ; len(b) >= 5; b = b[5:] {
			p, err := netip.AddrFrom4([4]byte(b[:4])).Prefix(int(b[4] % 33))
			if err == nil {
				in = append(in, p)
			}
		}
		out := compactPrefixes(slices.Clone(in))
		for _, p := range in {
			if !slices.ContainsFunc(out, func(q netip.Prefix) bool { return q.Bits() <= p.Bits() && q.Contains(p.Addr()) }) {
				t.Fatalf("%v not covered by %v", p, out)
			}
		}
		for i, q := range out {
			if !slices.Contains(in, q) {
				t.Fatalf("%v not in the input", q)
			}
			for _, r := range out[i+1:] {
				if q.Overlaps(r) {
					t.Fatalf("%v and %v overlap", q, r)
				}
			}
		}
	})
}
