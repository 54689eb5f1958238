package netpolicy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"testing"
	"time"
)

// egressUplink is a simulated uplink like newUplink's, on addresses of its
// own (198.18.81.0/24 and 2001:db8:81::/64 to the gateway netns, which
// plays two internet hosts 198.19.82.1 and 198.19.82.2, and two IPv6 ones
// 2001:db8:82::1 and 2001:db8:82::2, on its lo), so it never collides with
// other suites. Every address answers an echo service on port.
type egressUplink struct {
	nsPath string
	port   int
}

func newEgressUplink(t *testing.T) *egressUplink {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	sfx := hex.EncodeToString(b)
	ns, hostIf := "moatgwe"+sfx, "xe"+sfx
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd(t, "link", "add", hostIf, "type", "veth", "peer", "name", "up0", "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	in := func(args ...string) { ipCmd(t, append([]string{"-n", ns}, args...)...) }
	in("link", "set", "lo", "up")
	in("link", "set", "up0", "up")
	in("addr", "add", "198.18.81.1/24", "dev", "up0")
	in("addr", "add", "198.19.82.1/32", "dev", "lo")
	in("addr", "add", "198.19.82.2/32", "dev", "lo")
	in("-6", "addr", "add", "2001:db8:81::1/64", "dev", "up0", "nodad")
	in("-6", "addr", "add", "2001:db8:82::1/128", "dev", "lo")
	in("-6", "addr", "add", "2001:db8:82::2/128", "dev", "lo")
	ipCmd(t, "addr", "add", "198.18.81.2/24", "dev", hostIf)
	ipCmd(t, "-6", "addr", "add", "2001:db8:81::2/64", "dev", hostIf, "nodad")
	ipCmd(t, "link", "set", hostIf, "up")
	ipCmd(t, "route", "add", "198.19.82.0/24", "via", "198.18.81.1", "dev", hostIf)
	ipCmd(t, "-6", "route", "add", "2001:db8:82::/64", "via", "2001:db8:81::1", "dev", hostIf)
	u := &egressUplink{nsPath: "/run/netns/" + ns}
	inNetns(t, u.nsPath, func() {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		u.port = l.Addr().(*net.TCPAddr).Port
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					r := bufio.NewReader(c)
					for {
						line, err := r.ReadString('\n')
						if err != nil {
							return
						}
						if _, err := c.Write([]byte(line)); err != nil {
							return
						}
					}
				}()
			}
		}()
	})
	return u
}

func (u *egressUplink) addr(ip string) string { return net.JoinHostPort(ip, fmt.Sprint(u.port)) }

// reach reports whether the sandbox n reaches addr; a blocked probe must
// time out (dropped), not be refused.
func reach(t *testing.T, n *Net, addr string, want bool) {
	t.Helper()
	var err error
	try := dial
	if want {
		try = dialEventually
	}
	inNetns(t, n.NSPath, func() { err = try(addr) })
	var ne net.Error
	switch {
	case want && err != nil:
		t.Errorf("sandbox → %s: %v", addr, err)
	case !want && err == nil:
		t.Errorf("sandbox reached %s", addr)
	case !want && !(errors.As(err, &ne) && ne.Timeout()):
		t.Errorf("sandbox → %s: %v, want a timeout (dropped)", addr, err)
	}
}

// echo sends one line over c and waits for it back.
func echo(c net.Conn, s string) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(s + "\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && line != s+"\n" {
		err = fmt.Errorf("echo %q, got %q", s, line)
	}
	return err
}

// testAllowIPv6: allowOut opens exactly the IPv6 prefixes it names, on
// top of a deny-all; the policy is back to one IPv4 /32 afterwards.
func testAllowIPv6(t *testing.T, m *Manager, n *Net, u *egressUplink) {
	t.Log("allowOut opens exactly the IPv6 prefixes it names")
	ctx := context.Background()
	if err := m.SetEgress(ctx, n.ID, Egress{Allow: pfx("198.19.82.1/32", "2001:db8:82::1/128"), Deny: pfx("0.0.0.0/0"), Internet: true}); err != nil {
		t.Fatal(err)
	}
	reach(t, n, u.addr("2001:db8:82::1"), true)
	reach(t, n, u.addr("2001:db8:82::2"), false)
	if err := m.SetEgress(ctx, n.ID, Egress{Allow: pfx("198.19.82.1/32"), Deny: pfx("0.0.0.0/0"), Internet: true}); err != nil {
		t.Fatal(err)
	}
}

// TestEgressPolicy: allowOut/denyOut per sandbox, applied before the first
// packet (SetEgress before Setup), switched atomically by SetEgress, kept
// by a table reinstall, never reopening blocked networks, and removed by
// Teardown and Recover.
func TestEgressPolicy(t *testing.T) {
	ctx := context.Background()
	m := testManagerScope(t, "moatte", "te", "10.204.0.0/16")
	u := newEgressUplink(t)
	one, two, gw := u.addr("198.19.82.1"), u.addr("198.19.82.2"), u.addr("198.18.81.1")
	one6, two6, gw6 := u.addr("2001:db8:82::1"), u.addr("2001:db8:82::2"), u.addr("2001:db8:81::1")
	waitHostnets(t, m, netip.MustParsePrefix("198.18.81.0/24"), true)
	waitHostnets(t, m, netip.MustParsePrefix("2001:db8:81::/64"), true)

	id := testID(t)
	if err := m.SetEgress(ctx, id, Egress{Deny: pfx("0.0.0.0/0"), Internet: true}); err != nil {
		t.Fatal(err)
	}
	n := setUp(t, m, id, true)

	t.Log("deny all (0.0.0.0/0 denies IPv6 too)")
	reach(t, n, one, false)
	reach(t, n, two, false)
	reach(t, n, one6, false)

	t.Log("allow exactly one /32")
	start := time.Now()
	if err := m.SetEgress(ctx, id, Egress{Allow: pfx("198.19.82.1/32"), Deny: pfx("0.0.0.0/0"), Internet: true}); err != nil {
		t.Fatal(err)
	}
	t.Logf("update took %s", time.Since(start)) // a figure: tests set no absolute time limits
	reach(t, n, one, true)
	reach(t, n, two, false)
	reach(t, n, one6, false)
	if allow, deny, err := m.egressRanges(id); err != nil || len(allow) != 1 || len(deny) != 2 { // deny: 0.0.0.0/0 and ::/0
		t.Fatalf("ranges %v %v %v", allow, deny, err)
	}

	testAllowIPv6(t, m, n, u)

	t.Log("an established connection survives an update that keeps it allowed")
	var c net.Conn
	var err error
	inNetns(t, n.NSPath, func() { c, err = net.DialTimeout("tcp", one, 3*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := echo(c, "before"); err != nil {
		t.Fatal(err)
	}
	if err := m.SetEgress(ctx, id, Egress{Allow: pfx("198.19.82.0/31", "198.19.82.1/32"), Deny: pfx("0.0.0.0/0"), Internet: true}); err != nil {
		t.Fatal(err)
	}
	if err := echo(c, "after"); err != nil {
		t.Fatalf("established connection broken by an update that keeps it allowed: %v", err)
	}
	reach(t, n, two, false) // 198.19.82.0/31 is .0-.1

	t.Log("allowOut never opens blocked networks")
	if err := m.SetEgress(ctx, id, Egress{Allow: pfx("198.18.81.0/24", "10.0.0.0/8", "2001:db8:81::/64", "fc00::/7"), Internet: false}); err != nil {
		t.Fatal(err)
	}
	reach(t, n, gw, false)
	reach(t, n, gw6, false)
	reach(t, n, one, false)
	if err := echo(c, "cut"); err == nil {
		t.Error("connection to a destination no longer allowed still works")
	}

	t.Log("internet off, allowOut on")
	if err := m.SetEgress(ctx, id, Egress{Allow: pfx("198.19.82.2/32"), Internet: false}); err != nil {
		t.Fatal(err)
	}
	reach(t, n, two, true)
	reach(t, n, one, false)
	reach(t, n, one6, false)
	if nn, _ := m.Lookup(id); nn.Internet {
		t.Error("Lookup says internet after SetEgress without it")
	}

	t.Log("a reinstalled table keeps the policy")
	if err := m.fw.Install(); err != nil {
		t.Fatal(err)
	}
	reach(t, n, two, true)
	reach(t, n, one, false)

	t.Log("no policy: internet only")
	if err := m.SetEgress(ctx, id, Egress{Internet: true}); err != nil {
		t.Fatal(err)
	}
	reach(t, n, one, true)
	reach(t, n, two, true)
	reach(t, n, two6, true)
	if allow, deny, err := m.egressRanges(id); err != nil || len(allow)+len(deny) != 0 {
		t.Fatalf("ranges %v %v %v", allow, deny, err)
	}

	t.Log("Recover drops the policy of a sandbox no longer live; Teardown of the other leaves nothing")
	id2 := testID(t)
	if err := m.SetEgress(ctx, id2, Egress{Deny: pfx("198.19.82.0/24")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Setup(ctx, id2, false); err != nil {
		t.Fatal(err)
	}
	if err := m.SetEgress(ctx, id, Egress{Allow: pfx("198.19.82.1/32")}); err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	assertGone(t, m, id2)
	if allow, deny, _ := m.egressRanges(id2); len(allow)+len(deny) != 0 {
		t.Errorf("policy of %s left after Recover: %v %v", id2, allow, deny)
	}
	if allow, _, _ := m.egressRanges(id); len(allow) != 1 {
		t.Errorf("Recover removed the live sandbox's policy: %v", allow)
	}
	if err := m.Teardown(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, m, id)
	if allow, deny, _ := m.egressRanges(id); len(allow)+len(deny) != 0 {
		t.Errorf("policy left after Teardown: %v %v", allow, deny)
	}
}
