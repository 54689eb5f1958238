package netpolicy

import (
	"errors"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
)

func TestParseEntry(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		domain   bool
		err      string
	}{
		{in: "8.8.8.8", want: "8.8.8.8/32"},
		{in: "8.8.8.8/24", want: "8.8.8.0/24"},
		{in: "0.0.0.0/0", want: "0.0.0.0/0"},
		{in: "2001:db8::1", want: "2001:db8::1/128"},
		{in: "2001:db8::/32", want: "2001:db8::/32"},
		{in: "::ffff:1.2.3.4", want: "1.2.3.4/32"},
		{in: "Example.COM", want: "example.com", domain: true},
		{in: "*.example.com", want: "*.example.com", domain: true},
		{in: "localhost", want: "localhost", domain: true},
		{in: "", err: "empty"},
		{in: "1.2.3.4/33", err: "not a valid CIDR"},
		{in: "300.1.1.1", err: "not an IP address"},
		{in: "1.2.3", err: "not an IP address"},
		{in: "*", err: "not an IP address"},
		{in: "*.*.example.com", err: "not an IP address"},
		{in: "a*.example.com", err: "not an IP address"},
		{in: "-a.example.com", err: "not an IP address"},
		{in: "exa mple.com", err: "not an IP address"},
		{in: "1.2.3.4:443", err: "port rules are not supported"},
		{in: "example.com:443", err: "port rules are not supported"},
		{in: "fe80::1%eth0", err: "zone"},
	} {
		e, err := ParseEntry(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ParseEntry(%q) = %v, %v; want error with %q", tc.in, e, err, tc.err)
			}
			continue
		}
		if err != nil || e.String() != tc.want || e.IsDomain() != tc.domain {
			t.Errorf("ParseEntry(%q) = %v (domain %v), %v; want %s", tc.in, e, e.IsDomain(), err, tc.want)
		}
	}
}

func TestParseEgress(t *testing.T) {
	allow, deny, ca, cd, err := ParseEgress([]string{"1.2.3.4", "1.2.3.4/32", "10.0.0.0/8"}, []string{"0.0.0.0/0"})
	if err != nil || len(allow) != 2 || len(deny) != 1 || strings.Join(ca, ",") != "1.2.3.4/32,10.0.0.0/8" || cd[0] != "0.0.0.0/0" {
		t.Fatalf("%v %v %v %v %v", allow, deny, ca, cd, err)
	}
	allow, _, ca, _, err = ParseEgress([]string{"Example.com.", "*.example.com", "1.2.3.4", "example.com"}, []string{"0.0.0.0/0"})
	if err != nil || len(allow) != 1 || strings.Join(ca, ",") != "example.com,*.example.com,1.2.3.4/32" ||
		strings.Join(Domains(ca), ",") != "example.com,*.example.com" {
		t.Fatalf("domains in allowOut: %v %v %v", allow, ca, err)
	}
	// E2B: domains need denyOut 0.0.0.0/0; a narrower deny is refused.
	for _, deny := range [][]string{nil, {"8.8.8.8"}, {"0.0.0.0/1", "128.0.0.0/1"}} {
		_, _, _, _, err = ParseEgress([]string{"example.com"}, deny)
		if !errors.Is(err, ErrDomainsRequireDenyAll) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("domain without deny-all %v: %v", deny, err)
		}
	}
	_, _, _, _, err = ParseEgress(nil, []string{"example.com"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not supported for deny rules") {
		t.Fatalf("domain in denyOut: %v", err)
	}
	_, _, _, _, err = ParseEgress(nil, []string{"1.2.3.0/40"})
	if !strings.Contains(err.Error(), `network.denyOut`) || !strings.Contains(err.Error(), `"1.2.3.0/40"`) {
		t.Fatalf("malformed: %v", err)
	}
}
