package netpolicy

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
)

func TestAllocator(t *testing.T) {
	tests := []struct {
		name        string
		subnet      string
		ids         []string
		wantHost    []string
		wantSandbox []string
		wantErr     error
	}{
		{name: "first slots", subnet: "10.200.0.0/16", ids: []string{"a", "b"},
			wantHost: []string{"10.200.0.1", "10.200.0.5"}, wantSandbox: []string{"10.200.0.2", "10.200.0.6"}},
		{name: "crosses octet", subnet: "10.200.0.0/23", ids: make64("x"),
			wantHost: nil, wantSandbox: nil},
		{name: "duplicate", subnet: "10.200.0.0/16", ids: []string{"a", "a"}, wantErr: errdefs.ErrAlreadyExists},
		{name: "exhausted", subnet: "10.200.0.0/29", ids: []string{"a", "b", "c"}, wantErr: errdefs.ErrResourceExhausted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAllocator(netip.MustParsePrefix(tc.subnet))
			var err error
			for i, id := range tc.ids {
				var slot int
				slot, err = a.alloc(id, nil)
				if err != nil {
					break
				}
				h, s := a.addrs(slot)
				if got, ok := a.slotOf(s); !ok || got != slot {
					t.Fatalf("slotOf(%s) = %d, %v; want %d", s, got, ok, slot)
				}
				if i < len(tc.wantHost) && (h.String() != tc.wantHost[i] || s.String() != tc.wantSandbox[i]) {
					t.Fatalf("slot %d: got %s/%s, want %s/%s", slot, h, s, tc.wantHost[i], tc.wantSandbox[i])
				}
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestAllocatorNoImmediateReuse(t *testing.T) {
	a := newAllocator(netip.MustParsePrefix("10.200.0.0/16"))
	s1, _ := a.alloc("a", nil)
	a.free("a")
	s2, _ := a.alloc("b", nil)
	if s1 == s2 {
		t.Fatalf("freed slot %d reused at once", s1)
	}
}

func TestValidIDAndNames(t *testing.T) {
	o := defaultOptions()
	tests := []struct {
		id     string
		ok     bool
		hostIf string
	}{
		{"iabcdefghij0123456789", true, "mhiabcdefghij0"},
		{"short", true, "mhshort"},
		{"", false, ""},
		{"Upper", false, ""},
		{"a-b", false, ""},
		{"../x", false, ""},
	}
	for _, tc := range tests {
		err := validID(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("validID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
		if tc.ok && o.hostIf(tc.id) != tc.hostIf {
			t.Errorf("hostIf(%q) = %q, want %q", tc.id, o.hostIf(tc.id), tc.hostIf)
		}
		if len(o.hostIf(tc.id)) > 15 {
			t.Errorf("hostIf(%q) longer than 15", tc.id)
		}
	}
}

func make64(p string) []string {
	var out []string
	for i := 0; i < 64; i++ {
		out = append(out, p+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	return out
}

func TestAllocatorSkipsTaken(t *testing.T) {
	a := newAllocator(netip.MustParsePrefix("10.200.0.0/16"))
	s, err := a.alloc("a", func(slot int) bool { return slot < 3 })
	if err != nil || s != 3 {
		t.Fatalf("alloc = %d, %v; want 3", s, err)
	}
}

// TestIPv6Derivation: a sandbox's IPv6 addresses are its scope's prefix
// with the IPv4 address of the same slot as their last 32 bits, so the
// /30s become /126s and scopes with different IPv4 subnets never share an
// IPv6 address.
func TestIPv6Derivation(t *testing.T) {
	tests := []struct {
		name, subnet, ula   string
		slot                int
		host, sandbox, all6 string
	}{
		{"default, first slot", "10.200.0.0/16", "", 0, "fd6d:6f61:7400::ac8:1", "fd6d:6f61:7400::ac8:2", "fd6d:6f61:7400::ac8:0/112"},
		{"default, slot 1", "10.200.0.0/16", "", 1, "fd6d:6f61:7400::ac8:5", "fd6d:6f61:7400::ac8:6", "fd6d:6f61:7400::ac8:0/112"},
		{"crosses an octet", "10.200.0.0/16", "", 64, "fd6d:6f61:7400::ac8:101", "fd6d:6f61:7400::ac8:102", "fd6d:6f61:7400::ac8:0/112"},
		{"last slot", "10.200.0.0/16", "", 16383, "fd6d:6f61:7400::ac8:fffd", "fd6d:6f61:7400::ac8:fffe", "fd6d:6f61:7400::ac8:0/112"},
		{"another scope", "10.201.0.0/16", "", 0, "fd6d:6f61:7400::ac9:1", "fd6d:6f61:7400::ac9:2", "fd6d:6f61:7400::ac9:0/112"},
		{"operator prefix", "10.200.0.0/24", "fd12:3456:789a:1::/64", 2, "fd12:3456:789a:1::ac8:9", "fd12:3456:789a:1::ac8:a", "fd12:3456:789a:1::ac8:0/120"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultOptions()
			WithScope("x", "xx", netip.MustParsePrefix(tc.subnet))(&o)
			if tc.ula != "" {
				WithSubnet6(netip.MustParsePrefix(tc.ula))(&o)
			}
			a := newAllocator(o.subnet)
			h, s := a.addrs(tc.slot)
			h6, s6 := o.mapTo6(h), o.mapTo6(s)
			if h6.String() != tc.host || s6.String() != tc.sandbox {
				t.Fatalf("slot %d: %s/%s, want %s/%s", tc.slot, h6, s6, tc.host, tc.sandbox)
			}
			if got := o.sandboxes6(); got.String() != tc.all6 || !got.Contains(s6) {
				t.Fatalf("sandboxes6 = %s, want %s containing %s", got, tc.all6, s6)
			}
			if p, _ := h6.Prefix(Prefix6); !p.Contains(s6) || p.Contains(o.mapTo6(s.Next().Next())) {
				t.Fatalf("%s and %s are not alone in one /%d", h6, s6, Prefix6)
			}
		})
	}
	for _, p := range []string{"fd00::/97", "10.0.0.0/8", "::ffff:0:0/96"} {
		if validSubnet6(netip.MustParsePrefix(p)) {
			t.Errorf("%s accepted as an IPv6 prefix", p)
		}
	}
	if !validSubnet6(DefaultULA) || !netip.MustParsePrefix("fc00::/7").Contains(DefaultULA.Addr()) {
		t.Errorf("DefaultULA %s is not a unique local prefix", DefaultULA)
	}
}

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
