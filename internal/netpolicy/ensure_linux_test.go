package netpolicy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
)

// A table removed behind the manager's back (another server's Close, an
// operator's nft flush) is reinstalled by the next Setup: no sandbox is ever
// wired up without its firewall.
func TestSetupReinstallsMissingTable(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	if err := m.fw.Delete(); err != nil {
		t.Fatal(err)
	}
	id := testID(t)
	n, err := m.Setup(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(ctx, id) })
	hostAll := listen(t, "0.0.0.0:0").Addr().(*net.TCPAddr).Port
	inNetns(t, n.NSPath, func() {
		if err := dial(fmt.Sprintf("%s:%d", n.HostAddr, hostAll)); err == nil {
			t.Error("sandbox reached a host service after the table was deleted")
		}
	})
}

// A /30 one of whose addresses is already on a host interface (another
// process's leftover, an operator's address; up or down) is never handed
// out.
func TestSetupSkipsAddressesOnHost(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	m.mu.Lock()
	next := m.alloc.next
	h0, sb0 := m.alloc.addrs(next)
	h1, _ := m.alloc.addrs(next + 1)
	m.mu.Unlock()
	for i, a := range []netip.Addr{sb0, h1} {
		name := fmt.Sprintf("tnon%d", i)
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
		if err := netlink.LinkAdd(veth); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = netlink.LinkDel(veth) })
		if err := netlink.AddrAdd(veth, &netlink.Addr{IPNet: ipNet(a, 30)}); err != nil {
			t.Fatal(err)
		}
	}
	id := testID(t)
	n, err := m.Setup(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(ctx, id) })
	if n.HostAddr == h0 || n.HostAddr == h1 {
		t.Fatalf("sandbox got host address %s, whose /30 has an address on the host", n.HostAddr)
	}
	unused := netip.MustParseAddr("10.201.255.254")
	if !onHost(sb0) || !onHost(n.HostAddr) || onHost(n.SandboxAddr) || onHost(unused) {
		t.Errorf("onHost: %s (leftover) %v, %s (host side) %v, %s (in the netns) %v, %s (unused) %v", sb0, onHost(sb0),
			n.HostAddr, onHost(n.HostAddr), n.SandboxAddr, onHost(n.SandboxAddr), unused, onHost(unused))
	}
}
