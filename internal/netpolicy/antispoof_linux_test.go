package netpolicy

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/netpolicy/firewall"
	"github.com/moatsh/moat/internal/testkit"
)

// nftCounter reads a named counter, in netns ns when ns is not empty.
func nftCounter(t *testing.T, ns, family, table, name string) uint64 {
	t.Helper()
	args := []string{"list", "counter", family, table, name}
	if ns != "" {
		args = append([]string{"netns", "exec", ns, "nft"}, args...)
	}
	cmd := "nft"
	if ns != "" {
		cmd = "ip"
	}
	out, err := exec.Command(cmd, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", cmd, args, err, out)
	}
	mt := regexp.MustCompile(`packets (\d+)`).FindSubmatch(out)
	if mt == nil {
		t.Fatalf("no packet count in:\n%s", out)
	}
	n, _ := strconv.ParseUint(string(mt[1]), 10, 64)
	return n
}

// captureUDP counts, in the uplink's netns before anything else sees them,
// UDP packets to port (counter "p<port>") and those of them from src
// (counter "s<port>").
func (u *uplink) captureUDP(t *testing.T, port int, src netip.Addr) {
	t.Helper()
	fam := "ip"
	if src.Is6() {
		fam = "ip6"
	}
	script := fmt.Sprintf(`table inet cap {
	counter p%[1]d {}
	counter s%[1]d {}
	chain pre { type filter hook prerouting priority -400; }
}
add rule inet cap pre udp dport %[1]d counter name p%[1]d
add rule inet cap pre udp dport %[1]d %[3]s saddr %[2]s counter name s%[1]d
`, port, src, fam)
	cmd := exec.Command("ip", "netns", "exec", u.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("capture rules: %v\n%s", err, out)
	}
}

// sendRawUDP4 sends one IPv4/UDP packet with source src from inside the
// netns at nsPath (IP_HDRINCL: the header is the caller's).
func sendRawUDP4(t *testing.T, nsPath string, src, dst netip.Addr, port int) {
	t.Helper()
	pkt := make([]byte, 20+8+4)
	pkt[0], pkt[8], pkt[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	s, d := src.As4(), dst.As4()
	copy(pkt[12:], s[:])
	copy(pkt[16:], d[:])
	binary.BigEndian.PutUint16(pkt[20:], 40000)
	binary.BigEndian.PutUint16(pkt[22:], uint16(port))
	binary.BigEndian.PutUint16(pkt[24:], 12) // UDP length; checksum 0: none
	inNetns(t, nsPath, func() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: d}); err != nil {
			t.Errorf("send from %s: %v", src, err)
		}
	})
}

// sendFrame writes an Ethernet frame onto eth0 of the netns at nsPath.
func sendFrame(t *testing.T, nsPath string, dstMAC net.HardwareAddr, ethType uint16, payload func(srcMAC net.HardwareAddr) []byte) {
	t.Helper()
	inNetns(t, nsPath, func() {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			t.Error(err)
			return
		}
		src := eth.Attrs().HardwareAddr
		frame := append(append(append([]byte{}, dstMAC...), src...), byte(ethType>>8), byte(ethType))
		frame = append(frame, payload(src)...)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: eth.Attrs().Index, Halen: 6}
		copy(sa.Addr[:], dstMAC)
		if err := unix.Sendto(fd, frame, 0, sa); err != nil {
			t.Errorf("send frame: %v", err)
		}
	})
}

func udp6(src, dst netip.Addr, port int) []byte {
	p := make([]byte, 40+8)
	p[0], p[6], p[7] = 0x60, unix.IPPROTO_UDP, 64
	binary.BigEndian.PutUint16(p[4:], 8)
	s, d := src.As16(), dst.As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	binary.BigEndian.PutUint16(p[40:], 40000)
	binary.BigEndian.PutUint16(p[42:], uint16(port))
	binary.BigEndian.PutUint16(p[44:], 8)
	binary.BigEndian.PutUint16(p[46:], csum6(p[8:24], p[24:40], unix.IPPROTO_UDP, p[40:]))
	return p
}

// csum6 is the ICMPv6/UDP checksum of body over IPv6's pseudo header.
func csum6(src, dst []byte, next byte, body []byte) uint16 {
	b := append(append(append([]byte{}, src...), dst...), 0, 0, byte(len(body)>>8), byte(len(body)), 0, 0, 0, next)
	b = append(b, body...)
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	var sum uint32
	for i := 0; i < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// neighAdvert6 is an IPv6 unsolicited neighbour advertisement (override)
// from src to all nodes claiming target for mac.
func neighAdvert6(mac net.HardwareAddr, src, target netip.Addr) []byte {
	body := []byte{136, 0, 0, 0, 0x20, 0, 0, 0}
	t16 := target.As16()
	body = append(append(append(body, t16[:]...), 2, 1), mac...)
	s, d := src.As16(), netip.MustParseAddr("ff02::1").As16()
	binary.BigEndian.PutUint16(body[2:], csum6(s[:], d[:], unix.IPPROTO_ICMPV6, body))
	p := make([]byte, 40, 40+len(body))
	p[0], p[6], p[7] = 0x60, unix.IPPROTO_ICMPV6, 255
	binary.BigEndian.PutUint16(p[4:], uint16(len(body)))
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	return append(p, body...)
}

// arpPacket is an Ethernet/IPv4 ARP request from (mac, spa) for tpa.
func arpPacket(mac net.HardwareAddr, spa, tpa netip.Addr) []byte {
	p := []byte{0, 1, 8, 0, 6, 4, 0, 1}
	s, d := spa.As4(), tpa.As4()
	p = append(append(p, mac...), s[:]...)
	p = append(append(p, make([]byte, 6)...), d[:]...)
	return p
}

// TestAntiSpoofing: packets from a sandbox with any source but its own
// address never leave the host, IPv6 from a sandbox never does, and ARP
// from a sandbox cannot teach the host a neighbour for another address.
func TestAntiSpoofing(t *testing.T) {
	m := testManager(t)
	var nets []*Net
	for _, internet := range []bool{true, false} {
		n := setUp(t, m, testID(t), internet)
		nets = append(nets, n)
	}
	a, b := nets[0], nets[1]
	u := newUplink(t)
	inet := netip.MustParseAddr("198.19.72.1")
	masq := uplinkHost4.Addr()
	if err := dialEventually(u.addr(inet.String())); err != nil { // the host itself reaches it
		t.Fatal(err)
	}

	tests := []struct {
		name string
		src  netip.Addr
		want bool
	}{
		{"own address", a.SandboxAddr, true},
		{"foreign", netip.MustParseAddr("203.0.113.99"), false},
		{"another sandbox", b.SandboxAddr, false},
		{"own gateway", a.HostAddr, false},
		{"own /30 broadcast", a.SandboxAddr.Next(), false},
		{"destination itself", inet, false},
		{"uplink gateway", netip.MustParseAddr("198.18.71.1"), false},
	}
	before := nftCounter(t, "", "inet", m.o.table, firewall.CounterSpoofed4)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			port := 41000 + i
			u.captureUDP(t, port, masq)
			count := func(c string) uint64 { return nftCounter(t, u.ns, "inet", "cap", fmt.Sprintf("%s%d", c, port)) }
			if !tc.want {
				// A negative check: a few packets, each given 100 ms to
				// arrive, and none may.
				for range 5 {
					sendRawUDP4(t, a.NSPath, tc.src, inet, port)
					time.Sleep(100 * time.Millisecond)
				}
				if got := count("p"); got != 0 {
					t.Errorf("source %s: %d packets arrived, want none", tc.src, got)
				}
				return
			}
			testkit.WaitFor(t, 3*time.Second, fmt.Sprintf("a packet from source %s to arrive", tc.src), func() bool {
				sendRawUDP4(t, a.NSPath, tc.src, inet, port)
				return count("p") > 0
			})
			// Packets still on their way count on both counters: wait for
			// them to agree.
			testkit.WaitFor(t, 3*time.Second, fmt.Sprintf("every packet from source %s to arrive masqueraded to %s", tc.src, masq), func() bool {
				return count("s") == count("p")
			})
		})
	}
	if after := nftCounter(t, "", "inet", m.o.table, firewall.CounterSpoofed4); after <= before {
		t.Errorf("counter %s did not count the forged packets (%d → %d)", firewall.CounterSpoofed4, before, after)
	}

	t.Run("IPv6", func(t *testing.T) { testIPv6Spoofing(t, m, u, a, b) })
	t.Run("NDP", func(t *testing.T) { testNDPSpoofing(t, m, a, b) })

	t.Run("ARP", func(t *testing.T) { testARPSpoofing(t, m, a, b) })
}

// testIPv6Spoofing: IPv6 from a's eth0 leaves the host (masqueraded to the
// host's uplink address) only with a's own IPv6 address as its source.
func testIPv6Spoofing(t *testing.T, m *Manager, u *uplink, a, b *Net) {
	if !a.SandboxAddr6.IsValid() {
		t.Skip("by design: the host has no IPv6")
	}
	host, err := netlink.LinkByName(a.HostIf)
	if err != nil {
		t.Fatal(err)
	}
	inet6 := netip.MustParseAddr("2001:db8:72::1")
	if err := dialEventually(u.addr(inet6.String())); err != nil { // the host itself reaches it
		t.Fatal(err)
	}
	before := nftCounter(t, "", "inet", m.o.table, firewall.CounterSpoofed6)
	sendOne := func(port int, src netip.Addr) {
		sendFrame(t, a.NSPath, host.Attrs().HardwareAddr, unix.ETH_P_IPV6, func(net.HardwareAddr) []byte {
			return udp6(src, inet6, port)
		})
	}
	// send is for the negative checks: three frames, each given 100 ms
	// to arrive, then the count of those that did.
	send := func(port int, src netip.Addr) uint64 {
		u.captureUDP(t, port, uplinkHost6.Addr())
		for i := 0; i < 3; i++ {
			sendOne(port, src)
			time.Sleep(100 * time.Millisecond)
		}
		return nftCounter(t, u.ns, "inet", "cap", fmt.Sprintf("p%d", port))
	}
	forged := []netip.Addr{b.SandboxAddr6, a.HostAddr6, a.SandboxAddr6.Next(), netip.MustParseAddr("2001:db8:71::99"),
		uplinkHost6.Addr(), netip.MustParseAddr("fe80::1"), netip.IPv6Unspecified()}
	for i, src := range forged {
		if got := send(41100+i, src); got != 0 {
			t.Errorf("source %s: %d IPv6 packets from a sandbox arrived upstream", src, got)
		}
	}
	if after := nftCounter(t, "", "inet", m.o.table, firewall.CounterSpoofed6); after < before+uint64(len(forged)) {
		t.Errorf("counter %s: %d → %d, want at least %d more", firewall.CounterSpoofed6, before, after, len(forged))
	}
	// Control: the same frame from its own address arrives, masqueraded.
	const port = 41150
	u.captureUDP(t, port, uplinkHost6.Addr())
	count := func(c string) uint64 { return nftCounter(t, u.ns, "inet", "cap", fmt.Sprintf("%s%d", c, port)) }
	testkit.WaitFor(t, 3*time.Second, fmt.Sprintf("IPv6 from the sandbox's own address %s to arrive", a.SandboxAddr6), func() bool {
		sendOne(port, a.SandboxAddr6)
		return count("p") > 0
	})
	// Frames still on their way count on both counters: wait for them to
	// agree.
	testkit.WaitFor(t, 3*time.Second, fmt.Sprintf("every own IPv6 packet to arrive masqueraded to %s", uplinkHost6.Addr()), func() bool {
		return count("s") == count("p")
	})
}

// testNDPSpoofing: neighbour advertisements from a's eth0 claiming other
// addresses leave the host's IPv6 neighbour table as it was.
func testNDPSpoofing(t *testing.T, m *Manager, a, b *Net) {
	if !a.SandboxAddr6.IsValid() {
		t.Skip("by design: the host has no IPv6")
	}
	_ = dial(net.JoinHostPort(b.SandboxAddr6.String(), "1")) // an entry for b; refused is fine
	neigh := func(ip netip.Addr) string {
		list, _ := netlink.NeighList(0, netlink.FAMILY_V6)
		out := ""
		for _, n := range list {
			if x, ok := netip.AddrFromSlice(n.IP); ok && x == ip && n.HardwareAddr != nil {
				out += fmt.Sprintf("%d=%s ", n.LinkIndex, n.HardwareAddr)
			}
		}
		return out
	}
	allNodes := net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
	before := nftCounter(t, "", "inet", m.o.table, firewall.CounterSpoofed6)
	claims := []netip.Addr{b.SandboxAddr6, a.HostAddr6, netip.MustParseAddr("2001:db8:71::1")}
	for _, claim := range claims {
		was := neigh(claim)
		for _, src := range []netip.Addr{a.SandboxAddr6, netip.MustParseAddr("fe80::5054:ff:fe00:99")} {
			sendFrame(t, a.NSPath, allNodes, unix.ETH_P_IPV6, func(mac net.HardwareAddr) []byte { return neighAdvert6(mac, src, claim) })
		}
		time.Sleep(100 * time.Millisecond) // a negative check: time for a wrong entry to be learnt
		if now := neigh(claim); now != was {
			t.Errorf("neighbour entries for %s changed: %q → %q", claim, was, now)
		}
	}
	if after := nftCounter(t, "", "inet", m.o.table, firewall.CounterSpoofed6); after < before+uint64(2*len(claims)) {
		t.Errorf("counter %s: %d → %d, want %d more", firewall.CounterSpoofed6, before, after, 2*len(claims))
	}
}

// testARPSpoofing: ARP requests and gratuitous ARP from a's eth0 claiming
// other addresses leave the host's neighbour table as it was, while its own
// address is learnt (so the frames do arrive).
func testARPSpoofing(t *testing.T, m *Manager, a, b *Net) {
	host, err := netlink.LinkByName(a.HostIf)
	if err != nil {
		t.Fatal(err)
	}
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	_ = dial(fmt.Sprintf("%s:1", b.SandboxAddr))     // gives the host an entry for b; refused is fine
	neigh := func(ip netip.Addr) map[string]string { // link name → MAC
		out := map[string]string{}
		list, _ := netlink.NeighList(0, netlink.FAMILY_V4)
		for _, n := range list {
			if a, ok := netip.AddrFromSlice(n.IP.To4()); ok && a == ip && n.HardwareAddr != nil {
				l, _ := netlink.LinkByIndex(n.LinkIndex)
				if l != nil {
					out[l.Attrs().Name] = n.HardwareAddr.String()
				}
			}
		}
		return out
	}
	before := nftCounter(t, "", "arp", m.o.table, firewall.CounterSpoofARP)
	for _, claim := range []netip.Addr{b.SandboxAddr, b.HostAddr, netip.MustParseAddr("198.18.71.1"), netip.MustParseAddr("10.201.255.99")} {
		was := neigh(claim)
		sendFrame(t, a.NSPath, bcast, unix.ETH_P_ARP, func(mac net.HardwareAddr) []byte { return arpPacket(mac, claim, a.HostAddr) })
		sendFrame(t, a.NSPath, bcast, unix.ETH_P_ARP, func(mac net.HardwareAddr) []byte { return arpPacket(mac, claim, claim) })
		time.Sleep(100 * time.Millisecond) // a negative check: time for a wrong entry to be learnt
		if now := neigh(claim); fmt.Sprint(now) != fmt.Sprint(was) {
			t.Errorf("neighbour entries for %s changed: %v → %v", claim, was, now)
		}
	}
	if after := nftCounter(t, "", "arp", m.o.table, firewall.CounterSpoofARP); after < before+8 {
		t.Errorf("counter %s: %d → %d, want 8 more", firewall.CounterSpoofARP, before, after)
	}
	// Control: the sandbox's own address is learnt from the same kind of frame.
	_ = netlink.NeighDel(&netlink.Neigh{LinkIndex: host.Attrs().Index, IP: net.IP(a.SandboxAddr.AsSlice())})
	sendFrame(t, a.NSPath, bcast, unix.ETH_P_ARP, func(mac net.HardwareAddr) []byte { return arpPacket(mac, a.SandboxAddr, a.HostAddr) })
	testkit.WaitFor(t, 3*time.Second, fmt.Sprintf("the sandbox's own ARP (%s on %s) to be learnt", a.SandboxAddr, a.HostIf), func() bool {
		_, ok := neigh(a.SandboxAddr)[a.HostIf]
		return ok
	})
}
