package netpolicy

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/bench/benchpair"
	"github.com/moatsh/moat/internal/testkit"
	"github.com/vishvananda/netlink"
)

// A table removed behind the manager's back (another server's Close, an
// operator's nft flush) is reinstalled by the next Setup: no sandbox is ever
// wired up without its firewall.
func TestSetupReinstallsMissingTable(t *testing.T) {
	m := testManager(t)
	if err := m.fw.Delete(); err != nil {
		t.Fatal(err)
	}
	n := setUp(t, m, testID(t), false)
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
	n := setUp(t, m, testID(t), false)
	if n.HostAddr == h0 || n.HostAddr == h1 {
		t.Fatalf("sandbox got host address %s, whose /30 has an address on the host", n.HostAddr)
	}
	unused := netip.MustParseAddr("10.201.255.254")
	if !onHost(sb0) || !onHost(n.HostAddr) || onHost(n.SandboxAddr) || onHost(unused) {
		t.Errorf("onHost: %s (leftover) %v, %s (host side) %v, %s (in the netns) %v, %s (unused) %v", sb0, onHost(sb0),
			n.HostAddr, onHost(n.HostAddr), n.SandboxAddr, onHost(n.SandboxAddr), unused, onHost(unused))
	}
}

// A sandbox's veth has one queue each way on both ends, asked for at
// creation (see createVeth).
func TestVethOneQueue(t *testing.T) {
	m := testManager(t)
	n := setUp(t, m, testID(t), false)
	queues := func() string {
		var out []string
		for _, d := range []string{"tx-*", "rx-*"} {
			qs, _ := filepath.Glob(filepath.Join("/sys/class/net", n.HostIf, "queues", d))
			out = append(out, fmt.Sprint(len(qs)))
		}
		return strings.Join(out, " ")
	}
	if got := queues(); got != "1 1" {
		t.Errorf("host side %s: tx rx queues %s, want 1 1", n.HostIf, got)
	}
	l, err := netlink.LinkByName(n.HostIf)
	if err != nil {
		t.Fatal(err)
	}
	if a := l.Attrs(); a.NumTxQueues != 1 || a.NumRxQueues != 1 {
		t.Errorf("host side %s: %d tx, %d rx queues allocated, want 1 and 1", n.HostIf, a.NumTxQueues, a.NumRxQueues)
	}
	inNetns(t, n.NSPath, func() {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			t.Error(err)
			return
		}
		if a := l.Attrs(); a.NumTxQueues != 1 || a.NumRxQueues != 1 {
			t.Errorf("eth0: %d tx, %d rx queues allocated, want 1 and 1", a.NumTxQueues, a.NumRxQueues)
		}
	})
}

// BenchmarkVethCreate times making and deleting a veth pair with its
// queues asked for against the kernel's default (one per CPU, cut to one
// after registration), in the same process.
func BenchmarkVethCreate(b *testing.B) {
	testkit.RequireRoot(b)
	pair := func(asked bool) time.Duration {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "tnbench0"}, PeerName: "tnbench1"}
		if asked {
			v.NumTxQueues, v.NumRxQueues, v.PeerNumTxQueues, v.PeerNumRxQueues = 1, 1, 1, 1
		}
		start := time.Now()
		if err := netlink.LinkAdd(v); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		if err := netlink.LinkDel(v); err != nil {
			b.Fatal(err)
		}
		return d
	}
	benchpair.Compare(b, "veth pair creation",
		benchpair.Way{Name: "one-queue-asked", Run: func() time.Duration { return pair(true) }},
		benchpair.Way{Name: "default-queues", Run: func() time.Duration { return pair(false) }})
}
