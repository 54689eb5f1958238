package firewall

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestDescribeBinding: the description names the table whose antispoof
// set binds the interface to the address, and the allowed set's, and
// neither once they are gone.
func TestDescribeBinding(t *testing.T) {
	f := testFirewall(t)
	a := netip.MustParseAddr("10.203.0.2")
	if err := f.Bind("tfd1", a, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetAllowed("tfd1", true); err != nil {
		t.Fatal(err)
	}
	if got := DescribeBinding("tfd1", a); !strings.Contains(got, "bound to 10.203.0.2 in [moattf]") || !strings.Contains(got, "allowed out in [moattf]") {
		t.Fatalf("bound: %q", got)
	}
	if got := DescribeBinding("tfd1", netip.MustParseAddr("10.203.0.6")); !strings.Contains(got, "in []") {
		t.Fatalf("another address: %q", got)
	}
	if err := errors.Join(f.Unbind("tfd1"), f.SetAllowed("tfd1", false)); err != nil {
		t.Fatal(err)
	}
	if got := DescribeBinding("tfd1", a); got != "tfd1 bound to 10.203.0.2 in [], allowed out in []" {
		t.Fatalf("unbound: %q", got)
	}
}
