package netpolicy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/moatsh/moat/internal/netpolicy/firewall"
	"github.com/moatsh/moat/internal/netpolicy/hostnet"
	"github.com/moatsh/moat/internal/testkit"
)

// uplink is a simulated upstream network in a netns of its own ("gateway"),
// connected to the host by a veth. Its addresses come from the benchmarking
// range 198.18.0.0/15 and the IPv6 documentation prefix, away from the
// TEST-NET ranges other suites on this host simulate their uplinks with:
// the host side has 198.18.71.2/24 and
// 2001:db8:71::2/64; the gateway netns answers on 198.18.71.1, a neighbour
// 198.18.71.3 and 2001:db8:71::1, and plays the internet beyond it with
// 198.19.72.1 and 2001:db8:72::1 on its lo, routed by specific host routes.
// No test traffic ever leaves the namespaces the test made.
type uplink struct {
	ns     string // netns name
	nsPath string
	hostIf string
	port   int // TCP port answering on every address of the gateway netns
}

var (
	uplinkHost4 = netip.MustParsePrefix("198.18.71.2/24")
	uplinkHost6 = netip.MustParsePrefix("2001:db8:71::2/64")
)

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newUplink builds the uplink and removes it at cleanup (also on failure).
func newUplink(t *testing.T) *uplink {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	sfx := hex.EncodeToString(b)
	u := &uplink{ns: "moatgw" + sfx, hostIf: "xu" + sfx}
	u.nsPath = "/run/netns/" + u.ns
	ipCmd(t, "netns", "add", u.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", u.ns).Run() })
	ipCmd(t, "link", "add", u.hostIf, "type", "veth", "peer", "name", "up0", "netns", u.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", u.hostIf).Run() })
	in := func(args ...string) { ipCmd(t, append([]string{"-n", u.ns}, args...)...) }
	in("link", "set", "lo", "up")
	in("link", "set", "up0", "up")
	in("addr", "add", "198.18.71.1/24", "dev", "up0")
	in("addr", "add", "198.18.71.3/24", "dev", "up0")
	in("-6", "addr", "add", "2001:db8:71::1/64", "dev", "up0", "nodad")
	in("addr", "add", "198.19.72.1/32", "dev", "lo")
	in("-6", "addr", "add", "2001:db8:72::1/128", "dev", "lo")
	ipCmd(t, "addr", "add", uplinkHost4.String(), "dev", u.hostIf)
	ipCmd(t, "-6", "addr", "add", uplinkHost6.String(), "dev", u.hostIf, "nodad")
	ipCmd(t, "link", "set", u.hostIf, "up")
	ipCmd(t, "route", "add", "198.19.72.0/24", "via", "198.18.71.1", "dev", u.hostIf)
	ipCmd(t, "-6", "route", "add", "2001:db8:72::/64", "via", "2001:db8:71::1", "dev", u.hostIf)
	inNetns(t, u.nsPath, func() { u.port = listen(t, ":0").Addr().(*net.TCPAddr).Port })
	return u
}

func (u *uplink) addr(ip string) string { return net.JoinHostPort(ip, fmt.Sprint(u.port)) }

// hostnetsRules is the hostnets chain of m's table as nft prints it.
func hostnetsRules(t *testing.T, m *Manager) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "chain", "inet", m.o.table, firewall.HostnetsChain).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list chain: %v\n%s", err, out)
	}
	return string(out)
}

// droppedPrefixes are the destinations the hostnets chain's rules drop
// (nft prints "ip daddr 10.0.0.0/8 drop", "ip6 daddr ::1 drop").
func droppedPrefixes(rules string) []netip.Prefix {
	var out []netip.Prefix
	for _, line := range strings.Split(rules, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[1] != "daddr" || f[3] != "drop" {
			continue
		}
		if p, err := netip.ParsePrefix(f[2]); err == nil {
			out = append(out, p)
		} else if a, err := netip.ParseAddr(f[2]); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out
}

// drops reports whether the chain drops all of p, as one of its rules
// or inside a larger one (the chain merges adjacent prefixes), == want.
func drops(rules string, p netip.Prefix, want bool) bool {
	for _, d := range droppedPrefixes(rules) {
		if d.Bits() <= p.Bits() && d.Contains(p.Addr()) {
			return want
		}
	}
	return !want
}

// waitHostnets waits until the hostnets chain does (or does not) drop p.
func waitHostnets(t *testing.T, m *Manager, p netip.Prefix, want bool) {
	t.Helper()
	var rules string
	defer func() {
		if t.Failed() {
			t.Logf("hostnets chain of %s:\n%s", m.o.table, rules)
		}
	}()
	testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("the hostnets chain of %s to have drop of %s = %v", m.o.table, p, want), func() bool {
		rules = hostnetsRules(t, m)
		return drops(rules, p, want)
	})
}

// TestHostNetworksBlocked: a sandbox with internet access reaches what lies
// beyond the host's gateway, but not the gateway, the host's neighbours, any
// other network the host is directly connected to, or an operator's deny
// prefix; the block list follows address changes made after New.
func TestHostNetworksBlocked(t *testing.T) {
	m := testManager(t)
	md := testManagerScope(t, "moattd", "td", "10.203.0.0/16",
		WithDenyPrefixes([]netip.Prefix{netip.MustParsePrefix("198.19.72.0/24"), netip.MustParsePrefix("2001:db8:72::/64")}))
	setup := func(m *Manager) *Net {
		n := setUp(t, m, testID(t), true)
		return n
	}
	sb, sbDeny := setup(m), setup(md)
	if !sb.SandboxAddr6.IsValid() {
		t.Fatal("no IPv6 address for the sandbox on a host with IPv6")
	}
	u := newUplink(t) // after New: the watcher must pick it up
	for _, p := range []netip.Prefix{uplinkHost4.Masked(), uplinkHost6.Masked()} {
		waitHostnets(t, m, p, true)
		waitHostnets(t, md, p, true)
	}
	waitHostnets(t, md, netip.MustParsePrefix("198.19.72.0/24"), true)
	// Every other network of the host is in the chain too (probed by listing
	// only: test traffic never goes to the real uplink).
	for _, p := range hostPrefixes(t, m) {
		waitHostnets(t, m, p, true)
	}

	tests := []struct {
		name  string
		from  *Net
		to    string
		reach bool
	}{
		{"internet beyond the gateway", sb, u.addr("198.19.72.1"), true},
		{"gateway", sb, u.addr("198.18.71.1"), false},
		{"neighbour", sb, u.addr("198.18.71.3"), false},
		{"internet IPv6 beyond the gateway", sb, u.addr("2001:db8:72::1"), true},
		{"gateway IPv6", sb, u.addr("2001:db8:71::1"), false},
		{"host's own IPv6 address", sb, u.addr(uplinkHost6.Addr().String()), false},
		{"own IPv6 gateway", sb, u.addr(sb.HostAddr6.String()), false},
		{"another sandbox's IPv6 address", sb, u.addr(sbDeny.SandboxAddr6.String()), false},
		{"host's IPv6 gateway, other scope", sbDeny, u.addr("2001:db8:71::1"), false},
		{"operator deny prefix", sbDeny, u.addr("198.19.72.1"), false},
		{"operator deny prefix IPv6", sbDeny, u.addr("2001:db8:72::1"), false},
		{"gateway, other scope", sbDeny, u.addr("198.18.71.1"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			try := dial
			if tc.reach {
				try = dialEventually
			}
			inNetns(t, tc.from.NSPath, func() { err = try(tc.to) })
			var ne net.Error
			switch {
			case tc.reach && err != nil:
				t.Errorf("sandbox → %s: %v", tc.to, err)
			case !tc.reach && err == nil:
				t.Errorf("sandbox reached %s", tc.to)
			case !tc.reach && !(errors.As(err, &ne) && ne.Timeout()):
				t.Errorf("sandbox → %s: %v, want a timeout (dropped)", tc.to, err)
			}
		})
	}

	// A reinstalled table (ensureTable) keeps the current list.
	if err := m.fw.Delete(); err != nil {
		t.Fatal(err)
	}
	setup(m)
	waitHostnets(t, m, uplinkHost4.Masked(), true)

	// Removing the uplink's addresses removes their blocks (checked by
	// listing: 198.18.71.0/24 would now route to the real uplink).
	link, err := netlink.LinkByName(u.hostIf)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []netip.Prefix{uplinkHost4, uplinkHost6} {
		if err := netlink.AddrDel(link, &netlink.Addr{IPNet: prefixIPNet(p)}); err != nil {
			t.Fatal(err)
		}
		waitHostnets(t, m, p.Masked(), false)
	}
}

// hostPrefixes lists the masked prefix of every address on the host's
// interfaces outside m's sandboxes.
func hostPrefixes(t *testing.T, m *Manager) []netip.Prefix {
	t.Helper()
	addrs, _, err := hostnet.State()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if !m.isSandboxIf(a.Ifname) {
			out = append(out, a.Prefix.Masked())
		}
	}
	return out
}

func prefixIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
