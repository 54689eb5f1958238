package netpolicy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/moatsh/moat/internal/testkit"
)

// requireRoot: the tests create network namespaces, veths and nftables
// tables.
func requireRoot(t *testing.T) {
	t.Helper()
	testkit.RequireRoot(t)
}

func testID(t *testing.T) string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// setUp sets up sandbox id's network, torn down when the test ends.
func setUp(t *testing.T, m *Manager, id string, internet bool) *Net {
	t.Helper()
	n, err := m.Setup(context.Background(), id, internet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), id) })
	return n
}

// testManager uses its own table, interface prefix and subnet so it never
// touches a running server's objects.
func testManager(t *testing.T) *Manager {
	t.Helper()
	return testManagerScope(t, "moattn", "tn", "10.201.0.0/16")
}

// testManagerScope is testManager in another scope, with more options; its
// cleanup checks that the scope's tables are gone.
func testManagerScope(t *testing.T, table, ifPrefix, subnet string, opts ...Option) *Manager {
	t.Helper()
	requireRoot(t)
	m, err := New(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
		append([]Option{WithScope(table, ifPrefix, netip.MustParsePrefix(subnet))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	fwd, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	t.Cleanup(func() {
		_ = os.WriteFile("/proc/sys/net/ipv4/ip_forward", fwd, 0o644)
		if err := m.Close(); err != nil {
			t.Error(err)
		}
		for _, family := range []string{"inet", "arp"} {
			if out, _ := exec.Command("nft", "list", "table", family, table).CombinedOutput(); !strings.Contains(string(out), "No such file") {
				t.Errorf("table %s %s left behind:\n%s", family, table, out)
			}
		}
	})
	return m
}

// inNetns runs fn on a thread inside the namespace at path; the test
// stops if it cannot enter it (fn's results would be zero values).
func inNetns(t *testing.T, path string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	var enterErr error
	go func() {
		defer close(done) // also when fn ends the goroutine (t.FailNow)
		goruntime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			enterErr = err
			return
		}
		defer orig.Close()
		ns, err := netns.GetFromPath(path)
		if err != nil {
			enterErr = fmt.Errorf("netns %s: %w", path, err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			enterErr = fmt.Errorf("enter netns %s: %w", path, err)
			return
		}
		fn()
		if netns.Set(orig) == nil {
			goruntime.UnlockOSThread()
		}
	}()
	<-done
	if enterErr != nil {
		t.Fatal(enterErr)
	}
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

// dial tries one TCP connection; blocked probes expect its timeout.
func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 700*time.Millisecond)
	if err == nil {
		c.Close()
	}
	return err
}

// dialEventually is dial for connections that must work: a loaded host
// (QEMU under TCG on both cores in a parallel test package) can delay a
// SYN's softirq past one short timeout, so it retries for a few seconds.
// It is not testkit.WaitFor: it mostly runs in inNetns's goroutine (no
// t.Fatal there), stands in for dial and returns the last error.
func dialEventually(addr string) error {
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if err = dial(addr); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // a refusal returns at once
	}
	return err
}

func hostAddrOutside(t *testing.T) string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !strings.HasPrefix(ipn.IP.String(), "10.201.") {
			return ipn.IP.String()
		}
	}
	return ""
}

func TestIsolation(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	idA, idB, idC := testID(t), testID(t), testID(t)
	nets := map[string]*Net{}
	for _, tc := range []struct {
		id       string
		internet bool
	}{{idA, false}, {idB, false}, {idC, true}} {
		n, err := m.Setup(ctx, tc.id, tc.internet)
		if err != nil {
			t.Fatal(err)
		}
		nets[tc.id] = n
		t.Cleanup(func() { _ = m.Teardown(ctx, tc.id) })
	}
	if _, err := m.Setup(ctx, idA, false); err == nil {
		t.Fatal("second Setup of the same id succeeded")
	}
	a, b, c := nets[idA], nets[idB], nets[idC]

	// Listeners: on the host (loopback and all addresses) and in each sandbox.
	hostLo := listen(t, "127.0.0.1:0").Addr().(*net.TCPAddr).Port
	hostAll := listen(t, "0.0.0.0:0").Addr().(*net.TCPAddr).Port
	inside := map[string]string{}
	for id, n := range nets {
		inNetns(t, n.NSPath, func() {
			l := listen(t, net.JoinHostPort(n.SandboxAddr.String(), "0"))
			inside[id] = l.Addr().String()
		})
	}
	for id := range nets {
		if err := dialEventually(inside[id]); err != nil {
			t.Errorf("host → sandbox %s: %v", id, err)
		}
	}
	type probe struct {
		from *Net
		to   string
	}
	blocked := []probe{
		{a, fmt.Sprintf("127.0.0.1:%d", hostLo)},
		{a, fmt.Sprintf("%s:%d", a.HostAddr, hostAll)},
		{a, fmt.Sprintf("%s:%d", b.HostAddr, hostAll)},
		{c, fmt.Sprintf("%s:%d", c.HostAddr, hostAll)},
		{a, inside[idB]},
		{c, inside[idA]}, // internet allowed, still no sandbox → sandbox
		{b, inside[idC]},
	}
	if h := hostAddrOutside(t); h != "" {
		blocked = append(blocked, probe{a, fmt.Sprintf("%s:%d", h, hostAll)}, probe{c, fmt.Sprintf("%s:%d", h, hostAll)})
	}
	for _, p := range blocked {
		var err error
		inNetns(t, p.from.NSPath, func() { err = dial(p.to) })
		var ne net.Error
		switch {
		case err == nil:
			t.Errorf("sandbox %s reached %s", p.from.ID, p.to)
		case !strings.HasPrefix(p.to, "127.") && !(errors.As(err, &ne) && ne.Timeout()):
			// A refusal means the packet reached a host stack; a drop times out.
			t.Errorf("sandbox %s → %s: %v, want a timeout (dropped)", p.from.ID, p.to, err)
		}
	}
	fwd, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if strings.TrimSpace(string(fwd)) != "1" {
		t.Errorf("ip_forward = %q after a sandbox with internet", fwd)
	}

	// Recover keeps A and C, removes B; teardown then leaves nothing.
	if err := m.Recover(ctx, []string{idA, idC}); err != nil {
		t.Fatal(err)
	}
	if n, ok := m.Lookup(idC); !ok || n.SandboxAddr != c.SandboxAddr || !n.Internet {
		t.Fatalf("after Recover, Lookup(C) = %+v, %v", n, ok)
	}
	if _, ok := m.Lookup(idB); ok {
		t.Fatal("B still allocated after Recover")
	}
	assertGone(t, m, idB)
	for _, id := range []string{idA, idB, idC} {
		if err := m.Teardown(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := m.Teardown(ctx, id); err != nil {
			t.Fatalf("second teardown: %v", err)
		}
		assertGone(t, m, id)
	}
	if have, err := m.fw.AllowedIfs(); err != nil || len(have) != 0 {
		t.Fatalf("allowed set = %v, %v", have, err)
	}
}

// assertGone checks that no netns, link or set member of id remains.
func assertGone(t *testing.T, m *Manager, id string) {
	t.Helper()
	if _, err := os.Stat("/run/netns/" + m.o.netnsName(id)); !os.IsNotExist(err) {
		t.Errorf("netns of %s still there (%v)", id, err)
	}
	if _, err := netlink.LinkByName(m.o.hostIf(id)); err == nil {
		t.Errorf("veth of %s still there", id)
	}
	if have, _ := m.fw.AllowedIfs(); have[m.o.hostIf(id)] {
		t.Errorf("%s still in the allowed set", id)
	}
	if bound, err := m.fw.BoundAddrs(); err != nil || len(bound[m.o.hostIf(id)]) != 0 {
		t.Errorf("%s still in set sandbox_addrs: %v, %v", id, bound, err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), id) {
		t.Errorf("ip netns list still shows %s:\n%s", id, out)
	}
}

// TestInternetEgress needs outside connectivity, so it is opt-in:
// MOAT_TEST_INTERNET=host:port (e.g. deb.debian.org:80).
func TestInternetEgress(t *testing.T) {
	target := os.Getenv("MOAT_TEST_INTERNET")
	if target == "" {
		t.Skip("opt-in: set MOAT_TEST_INTERNET=host:port to test egress through NAT")
	}
	m := testManager(t)
	ctx := context.Background()
	host, port, _ := net.SplitHostPort(target)
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		t.Fatalf("resolve %s: %v", host, err)
	}
	var ip4 string
	for _, ip := range ips {
		if ip.To4() != nil {
			ip4 = ip.String()
			break
		}
	}
	addr := net.JoinHostPort(ip4, port)
	for _, tc := range []struct {
		name     string
		internet bool
	}{{"allowed", true}, {"denied", false}} {
		t.Run(tc.name, func(t *testing.T) {
			id := testID(t)
			n, err := m.Setup(ctx, id, tc.internet)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Teardown(ctx, id)
			try := dial
			if tc.internet {
				try = dialEventually
			}
			inNetns(t, n.NSPath, func() { err = try(addr) })
			if (err == nil) != tc.internet {
				t.Errorf("dial %s with internet=%v: %v", addr, tc.internet, err)
			}
		})
	}
}
