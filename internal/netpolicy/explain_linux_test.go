package netpolicy

import (
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExplain: the host's own loopback address is reached through lo, and
// the text names the device and its state.
func TestExplain(t *testing.T) {
	got := Explain(netip.MustParseAddr("127.0.0.1"))
	if !strings.Contains(got, "route to 127.0.0.1 via lo (oper ") || !strings.Contains(got, "lo bound to 127.0.0.1 in []") {
		t.Fatalf("Explain(127.0.0.1) = %q", got)
	}
}

func TestNeighState(t *testing.T) {
	for s, want := range map[int]string{
		unix.NUD_REACHABLE:                  "reachable",
		unix.NUD_STALE | unix.NUD_PERMANENT: "stale|permanent",
		0:                                   "state 0x0",
	} {
		if got := neighState(s); got != want {
			t.Errorf("neighState(%#x) = %q, want %q", s, got, want)
		}
	}
}
