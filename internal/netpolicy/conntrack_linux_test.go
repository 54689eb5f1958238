package netpolicy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/bench/benchpair"
	"github.com/moatsh/moat/internal/testkit"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// staleEntry puts an ESTABLISHED TCP entry from the host to n's envd port
// into the host's conntrack table, as a sandbox whose network vanished
// under an open connection leaves it.
func staleEntry(t *testing.T, n *Net, sport uint16) {
	t.Helper()
	if err := createEntry(n, sport); err != nil {
		t.Fatalf("create a conntrack entry: %v", err)
	}
	t.Cleanup(func() {
		_, _ = deleteEntries(&netlink.Handle{}, addrFilter{n.SandboxAddr: true}, nl.FAMILY_V4)
	})
}

// createEntry makes the entry staleEntry describes.
func createEntry(n *Net, sport uint16) error {
	h, s := net.IP(n.HostAddr.AsSlice()), net.IP(n.SandboxAddr.AsSlice())
	flow := &netlink.ConntrackFlow{FamilyType: unix.AF_INET, TimeOut: 3600,
		Forward:   netlink.IPTuple{SrcIP: h, DstIP: s, SrcPort: sport, DstPort: 49983, Protocol: unix.IPPROTO_TCP},
		Reverse:   netlink.IPTuple{SrcIP: s, DstIP: h, SrcPort: 49983, DstPort: sport, Protocol: unix.IPPROTO_TCP},
		ProtoInfo: &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_ESTABLISHED}}
	return netlink.ConntrackCreate(netlink.ConntrackTable, nl.FAMILY_V4, flow)
}

// entriesOf counts the host's conntrack entries with addr at either end.
func entriesOf(t *testing.T, addr netip.Addr) int {
	t.Helper()
	flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, nl.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	n, f := 0, addrFilter{addr: true}
	for _, fl := range flows {
		if f.MatchConntrackFlow(fl) {
			n++
		}
	}
	return n
}

// TestTeardownDeletesConntrackEntries: a sandbox's conntrack entries go
// with its network (left alone they stay ESTABLISHED for five days), and
// its slot is handed out again only once they are gone: in a pool of two
// /30s, a Setup right after a Teardown that needs the freed slot finds
// its entries deleted.
func TestTeardownDeletesConntrackEntries(t *testing.T) {
	m := testManagerScope(t, "moattk", "tk", "10.207.0.0/29")
	ctx := context.Background()
	idA, idB := testID(t), testID(t)
	a, err := m.Setup(ctx, idA, false)
	if err != nil {
		t.Fatal(err)
	}
	setUp(t, m, idB, false)
	staleEntry(t, a, 40001)
	staleEntry(t, a, 40002)
	if got := entriesOf(t, a.SandboxAddr); got != 2 {
		t.Fatalf("%d conntrack entries for %s before the teardown, want 2", got, a.SandboxAddr)
	}
	if err := m.Teardown(ctx, idA); err != nil {
		t.Fatal(err)
	}
	c := setUp(t, m, testID(t), false) // only A's slot is free
	if c.SandboxAddr != a.SandboxAddr {
		t.Fatalf("the third sandbox got %s, want the freed %s", c.SandboxAddr, a.SandboxAddr)
	}
	if got := entriesOf(t, a.SandboxAddr); got != 0 {
		t.Errorf("%d conntrack entries of the torn-down sandbox's address when it was handed out again", got)
	}
}

// TestConntrackSweptInBackground: without a Setup waiting for the slot,
// the sweeper deletes a torn-down sandbox's entries within a moment.
func TestConntrackSweptInBackground(t *testing.T) {
	m := testManager(t)
	id := testID(t)
	n, err := m.Setup(context.Background(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	staleEntry(t, n, 40003)
	if err := m.Teardown(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for entriesOf(t, n.SandboxAddr) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the torn-down sandbox's conntrack entry is still there after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The pass deletes the entry before it ends, and the slot stays pending
	// until then (TestSlotPendingDuringPass): wait for the end of the pass.
	for m.ct.hasPending() {
		if time.Now().After(deadline) {
			t.Fatalf("its slot is still pending 10 s after the teardown")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFilters(t *testing.T) {
	a, other, outside := netip.MustParseAddr("10.9.0.2"), net.ParseIP("10.9.0.6"), net.ParseIP("192.0.2.1")
	ip := net.IP(a.AsSlice())
	addr := addrFilter{a: true}
	scope := scopeFilter{ranges: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, live: addrFilter{netip.MustParseAddr("10.9.0.6"): true}}
	fwd := func(src, dst net.IP) netlink.ConntrackFlow {
		return netlink.ConntrackFlow{Forward: netlink.IPTuple{SrcIP: src, DstIP: dst}}
	}
	for _, tc := range []struct {
		name   string
		filter netlink.CustomConntrackFilter
		flow   netlink.ConntrackFlow
		want   bool
	}{
		{"to it", addr, fwd(other, ip), true},
		{"from it", addr, fwd(ip, other), true},
		{"reply to it (NAT)", addr, netlink.ConntrackFlow{Forward: netlink.IPTuple{SrcIP: other, DstIP: other}, Reverse: netlink.IPTuple{SrcIP: other, DstIP: ip}}, true},
		{"as a v4-mapped v6 address", addr, fwd(ip.To16(), other), true},
		{"another address", addr, fwd(other, other), false},
		{"no addresses", addr, netlink.ConntrackFlow{}, false},
		{"scope: a stale address in it", scope, fwd(outside, ip), true},
		{"scope: a live address", scope, fwd(outside, other), false},
		{"scope: outside it", scope, fwd(outside, outside), false},
	} {
		if got := tc.filter.MatchConntrackFlow(&tc.flow); got != tc.want {
			t.Errorf("%s: match = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRecoverDeletesStaleConntrackEntries: Recover deletes the entries of
// the scope's addresses that no live sandbox holds (a crashed server's, or
// from before teardowns swept) and keeps the live sandboxes'.
func TestRecoverDeletesStaleConntrackEntries(t *testing.T) {
	m := testManagerScope(t, "moattk", "tk", "10.207.0.0/24")
	live := testID(t)
	n := setUp(t, m, live, false)
	staleEntry(t, n, 40004)
	m.mu.Lock()
	h, s := m.alloc.addrs(40) // a slot no sandbox holds
	m.mu.Unlock()
	gone := &Net{HostAddr: h, SandboxAddr: s}
	staleEntry(t, gone, 40005)
	if err := m.Recover(context.Background(), []string{live}); err != nil {
		t.Fatal(err)
	}
	if got := entriesOf(t, s); got != 0 {
		t.Errorf("%d conntrack entries of %s (no sandbox) after Recover, want 0", got, s)
	}
	if got := entriesOf(t, n.SandboxAddr); got != 1 {
		t.Errorf("%d conntrack entries of the live sandbox's %s after Recover, want 1", got, n.SandboxAddr)
	}
}

// BenchmarkSweep: one pass deleting the entries of 100 freed addresses
// (three each) among 3,000 others, through one netlink socket against a
// socket per request (the netlink package's functions).
func BenchmarkSweep(b *testing.B) {
	testkit.RequireRoot(b)
	fill := func() addrFilter {
		f := addrFilter{}
		for i := range 100 {
			n := &Net{HostAddr: netip.AddrFrom4([4]byte{10, 208, byte(i), 1}), SandboxAddr: netip.AddrFrom4([4]byte{10, 208, byte(i), 2})}
			for p := range 3 {
				if err := createEntry(n, uint16(41000+p)); err != nil {
					b.Fatal(err)
				}
			}
			f[n.SandboxAddr] = true
		}
		return f
	}
	pass := func(h *netlink.Handle) time.Duration {
		f := fill()
		start := time.Now()
		n, err := deleteEntries(h, f, nl.FAMILY_V4)
		d := time.Since(start)
		if err != nil || n != 300 {
			b.Fatalf("deleted %d, %v; want 300", n, err)
		}
		return d
	}
	// A host with 1,000 sandboxes holds a few thousand other entries,
	// which every pass dumps and parses too.
	for i := range 3000 {
		n := &Net{HostAddr: netip.AddrFrom4([4]byte{10, 209, byte(i / 250), byte(i % 250)}), SandboxAddr: netip.AddrFrom4([4]byte{10, 209, 255, 2})}
		if err := createEntry(n, 42000); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		_, _ = deleteEntries(&netlink.Handle{}, scopeFilter{ranges: []netip.Prefix{netip.MustParsePrefix("10.208.0.0/15")}}, nl.FAMILY_V4)
	})
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	benchpair.Compare(b, "conntrack sweep of 100 addresses among 3,000 other entries",
		benchpair.Way{Name: "one-socket", Run: func() time.Duration { return pass(h) }},
		benchpair.Way{Name: "socket-per-request", Run: func() time.Duration { return pass(&netlink.Handle{}) }})
}

// TestSlotPendingDuringPass: a slot stays pending (not handed out) until
// the pass deleting its entries has ended, and is free after it, also when
// the deletion failed.
func TestSlotPendingDuringPass(t *testing.T) {
	for _, fail := range []bool{false, true} {
		s := newCTSweeper()
		a := netip.MustParseAddr("10.9.0.2")
		s.queue(7, a, netip.Addr{})
		s.del = func(f addrFilter) (uint, error) {
			if !s.isPending(7) {
				t.Error("slot 7 was released before its pass ended")
			}
			if len(f) != 1 || !f[a] {
				t.Errorf("pass filter %v, want only %s", f, a)
			}
			if fail {
				return 0, errors.New("netlink failed")
			}
			return 1, nil
		}
		n, err := s.sweep()
		if (err != nil) != fail || (!fail && n != 1) {
			t.Errorf("sweep (failing %v) = %d, %v", fail, n, err)
		}
		if s.isPending(7) || s.hasPending() {
			t.Errorf("slot 7 still pending after the pass (failing %v)", fail)
		}
		if n, err := s.sweep(); n != 0 || err != nil {
			t.Errorf("an empty pass = %d, %v", n, err)
		}
	}
}

// TestFilterFamilies: a pass dumps only the tables of its addresses'
// families (each dump walks the whole hash table).
func TestFilterFamilies(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.9.0.2"), netip.MustParseAddr("fd00::2")
	for _, tc := range []struct {
		f    addrFilter
		want []netlink.InetFamily
	}{
		{addrFilter{}, nil},
		{addrFilter{v4: true}, []netlink.InetFamily{nl.FAMILY_V4}},
		{addrFilter{v6: true}, []netlink.InetFamily{nl.FAMILY_V6}},
		{addrFilter{v4: true, v6: true}, []netlink.InetFamily{nl.FAMILY_V4, nl.FAMILY_V6}},
	} {
		if got := tc.f.families(); !slices.Equal(got, tc.want) {
			t.Errorf("families of %v = %v, want %v", tc.f, got, tc.want)
		}
	}
}
