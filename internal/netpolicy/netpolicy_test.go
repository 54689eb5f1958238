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
