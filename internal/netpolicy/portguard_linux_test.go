package netpolicy

import (
	"errors"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// TestProxyPortGuardKeepsHostReplies: the guard on the egress proxy's
// ports refuses connections to them from other interfaces, but not the
// replies to a connection the host made from such a port once nothing
// listens on it (a table that outlived its server, another scope's table):
// dropping those hung the host's connect, as it hung the proxy's dials to
// sandboxes of the main scope while a cluster test's stale table held one
// of their source ports.
func TestProxyPortGuardKeepsHostReplies(t *testing.T) {
	dnsPort, proxyPort := freePort(t), freePort(t)
	testManagerScope(t, "moattq", "tq", "10.210.0.0/16", WithEgressProxy(EgressProxy{DNSPort: dnsPort, ProxyPort: proxyPort}))
	// A peer outside the scope: a network namespace on a plain veth.
	const ns, hostIP, peerIP = "moattq-peer", "10.212.9.1", "10.212.9.2"
	_ = exec.Command("ip", "netns", "del", ns).Run()
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd(t, "link", "add", "xq9h", "type", "veth", "peer", "name", "xq9p", "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "xq9h").Run() })
	ipCmd(t, "addr", "add", hostIP+"/30", "dev", "xq9h")
	ipCmd(t, "link", "set", "xq9h", "up")
	ipCmd(t, "-n", ns, "addr", "add", peerIP+"/30", "dev", "xq9p")
	ipCmd(t, "-n", ns, "link", "set", "xq9p", "up")
	var peer net.Listener
	inNetns(t, "/run/netns/"+ns, func() {
		var err error
		if peer, err = net.Listen("tcp", peerIP+":0"); err != nil {
			t.Error(err)
		}
	})
	if peer == nil {
		t.FailNow()
	}
	defer peer.Close()

	for _, port := range []uint16{proxyPort, dnsPort} {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(hostIP), Port: int(port)}, Timeout: 3 * time.Second}
		c, err := d.Dial("tcp", peer.Addr().String())
		if err != nil {
			t.Fatalf("the host's connect from the guarded port %d to a peer: %v (its SYN-ACK was dropped)", port, err)
		}
		_ = c.(*net.TCPConn).SetLinger(0) // no TIME_WAIT: the port is listened on below
		c.Close()
	}

	// The guard itself still holds: the peer reaches no listener on the
	// proxy port (its SYN is dropped, so the connect times out).
	l, err := net.Listen("tcp", net.JoinHostPort(hostIP, strconv.Itoa(int(proxyPort))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	inNetns(t, "/run/netns/"+ns, func() {
		c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second)
		if err == nil {
			c.Close()
			t.Error("a peer outside the scope reached the egress proxy's port")
			return
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("the peer's connect to the proxy port: %v, want a timeout (dropped)", err)
		}
	})
}
