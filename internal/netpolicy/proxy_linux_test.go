package netpolicy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/moatsh/moat/internal/egress"
)

// domainUplink is a simulated internet on addresses of its own
// (198.18.85.0/24 to the gateway netns; web 198.19.86.1 and .2 on its lo,
// HTTP :80 and HTTPS :443 answering with the Host they saw, an echo port;
// DNS on 198.19.86.53 answering api.allowed.test and other.allowed.test
// with 198.19.86.1).
type domainUplink struct {
	echo int
	dnsQ chan string // names the DNS server was asked
}

func newDomainUplink(t *testing.T) *domainUplink {
	t.Helper()
	sfx := testID(t)[1:9]
	ns, hostIf := "moatgwd"+sfx, "xd"+sfx
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd(t, "link", "add", hostIf, "type", "veth", "peer", "name", "up0", "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	in := func(args ...string) { ipCmd(t, append([]string{"-n", ns}, args...)...) }
	in("link", "set", "lo", "up")
	in("link", "set", "up0", "up")
	in("addr", "add", "198.18.85.1/24", "dev", "up0")
	for _, a := range []string{"198.19.86.1", "198.19.86.2", "198.19.86.53"} {
		in("addr", "add", a+"/32", "dev", "lo")
	}
	ipCmd(t, "addr", "add", "198.18.85.2/24", "dev", hostIf)
	ipCmd(t, "link", "set", hostIf, "up")
	ipCmd(t, "route", "add", "198.19.86.0/24", "via", "198.18.85.1", "dev", hostIf)
	u := &domainUplink{dnsQ: make(chan string, 100)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host="+r.Host) })
	inNetns(t, "/run/netns/"+ns, func() {
		l80, err := net.Listen("tcp", ":80")
		if err != nil {
			t.Fatal(err)
		}
		s80 := &http.Server{Handler: h}
		go s80.Serve(l80)
		t.Cleanup(func() { s80.Close() })
		l443, err := net.Listen("tcp", ":443")
		if err != nil {
			t.Fatal(err)
		}
		s443 := httptest.NewUnstartedServer(h)
		s443.Listener.Close()
		s443.Listener = l443
		s443.StartTLS()
		t.Cleanup(s443.Close)
		le, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { le.Close() })
		u.echo = le.Addr().(*net.TCPAddr).Port
		go func() {
			for {
				c, err := le.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("hello"))
				c.Close()
			}
		}()
		pc, err := net.ListenPacket("udp", "198.19.86.53:53")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go serveZone(pc, u.dnsQ, map[string]netip.Addr{
			"api.allowed.test.": netip.MustParseAddr("198.19.86.1"), "other.allowed.test.": netip.MustParseAddr("198.19.86.1")})
	})
	return u
}

func serveZone(pc net.PacketConn, seen chan<- string, zone map[string]netip.Addr) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		select {
		case seen <- q.Name.String():
		default:
		}
		a, ok := zone[strings.ToLower(q.Name.String())]
		rh := dnsmessage.Header{ID: h.ID, Response: true}
		if !ok {
			rh.RCode = dnsmessage.RCodeNameError
		}
		b := dnsmessage.NewBuilder(nil, rh)
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		if ok && q.Type == dnsmessage.TypeA {
			_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: a.As4()})
		}
		out, _ := b.Finish()
		pc.WriteTo(out, from)
	}
}

// lookupAt sends one A query for name to server:53 over UDP and returns
// the rcode and the first address.
func lookupAt(server, name string) (dnsmessage.RCode, netip.Addr, error) {
	c, err := net.DialTimeout("udp", server+":53", time.Second)
	if err != nil {
		return 0, netip.Addr{}, err
	}
	defer c.Close()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 77, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(q); err != nil {
		return 0, netip.Addr{}, err
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return 0, netip.Addr{}, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[:n])
	if err != nil {
		return 0, netip.Addr{}, err
	}
	_ = p.SkipAllQuestions()
	rrs, _ := p.AllAnswers()
	for _, rr := range rrs {
		if a, ok := rr.Body.(*dnsmessage.AResource); ok {
			return h.RCode, netip.AddrFrom4(a.A), nil
		}
	}
	return h.RCode, netip.Addr{}, nil
}

// fetch does one GET to ip (port 80, or 443 over TLS with SNI host) with
// Host host and returns the body, or an error when the connection is cut.
func fetch(ip, host string, tlsOn bool) (string, error) {
	port := "80"
	if tlsOn {
		port = "443"
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, port), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if tlsOn {
		tc := tls.Client(c, &tls.Config{ServerName: host, InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			return "", err
		}
		c = tc
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	s := string(b)
	if _, body, ok := strings.Cut(s, "\r\n\r\n"); ok && strings.HasPrefix(s, "HTTP/1.1 200") {
		return body, nil
	}
	return "", fmt.Errorf("response %q", s)
}

// TestDomainEgress: a sandbox with domain rules and deny-all gets DNS
// answers only for allowed names (any server it asks: the query never
// leaves the host otherwise), reaches allowed names over HTTP and HTTPS
// only at the addresses they resolved to, and nothing else; a live update
// swaps the list; dropping the domains takes the proxy out of the path.
func TestDomainEgress(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	u := newDomainUplink(t)
	svc, err := egress.Start(slog.New(slog.NewTextHandler(os.Stderr, nil)), []netip.AddrPort{netip.MustParseAddrPort("198.19.86.53:53")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	m := testManagerScope(t, "moattd", "td", "10.205.0.0/16", WithEgressProxy(EgressProxy{
		DNSPort: svc.DNSPort(), ProxyPort: svc.ProxyPort(), UseBlocked: svc.UseBlocked,
		Rules: func(a netip.Addr, r ProxyRules) { svc.SetPolicy(a, egress.Policy{Domains: r.Domains}) }}))
	id := testID(t)
	deny := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	if err := m.SetEgress(ctx, id, Egress{Deny: deny, Internet: true, Domains: []string{"api.allowed.test"}}); err != nil {
		t.Fatal(err)
	}
	n := setUp(t, m, id, true)

	in := func(fn func()) { inNetns(t, n.NSPath, fn) }
	in(func() {
		// Any DNS server the sandbox asks is Moat's resolver.
		for _, server := range []string{"198.19.86.53", "198.19.86.99"} {
			rc, a, err := lookupAt(server, "api.allowed.test")
			if err != nil || rc != dnsmessage.RCodeSuccess || a != netip.MustParseAddr("198.19.86.1") {
				t.Errorf("lookup api.allowed.test at %s: %v %v %v", server, rc, a, err)
			}
		}
		for _, name := range []string{"other.allowed.test", "secret-data.evil.test"} {
			if rc, _, err := lookupAt("198.19.86.53", name); err != nil || rc != dnsmessage.RCodeNameError {
				t.Errorf("lookup %s: %v %v, want NXDOMAIN", name, rc, err)
			}
		}
		for _, tlsOn := range []bool{false, true} {
			if body, err := fetch("198.19.86.1", "api.allowed.test", tlsOn); err != nil || body != "host=api.allowed.test" {
				t.Errorf("tls %v: allowed name: %q %v", tlsOn, body, err)
			}
			for _, c := range []struct{ ip, host string }{
				{"198.19.86.1", "other.allowed.test"}, // second name on the same IP
				{"198.19.86.2", "api.allowed.test"},   // allowed name at an address it did not resolve to
				{"198.19.86.1", "198.19.86.1"},        // raw IP
			} {
				if body, err := fetch(c.ip, c.host, tlsOn); err == nil {
					t.Errorf("tls %v: %s with %s passed: %q", tlsOn, c.ip, c.host, body)
				}
			}
		}
	})
	// Other ports stay closed (dropped by deny-all, not proxied).
	reach(t, n, net.JoinHostPort("198.19.86.1", fmt.Sprint(u.echo)), false)
	for {
		select {
		case q := <-u.dnsQ:
			if strings.Contains(q, "evil") || strings.Contains(q, "other") {
				t.Errorf("refused name %s reached the upstream", q)
			}
			continue
		default:
		}
		break
	}

	// Live update: the other name now, the first one no longer.
	if err := m.SetEgress(ctx, id, Egress{Deny: deny, Internet: true, Domains: []string{"other.allowed.test"}}); err != nil {
		t.Fatal(err)
	}
	in(func() {
		if rc, _, _ := lookupAt("198.19.86.53", "other.allowed.test"); rc != dnsmessage.RCodeSuccess {
			t.Errorf("after update: other.allowed.test: %v", rc)
		}
		if body, err := fetch("198.19.86.1", "other.allowed.test", true); err != nil || body != "host=other.allowed.test" {
			t.Errorf("after update: other.allowed.test: %q %v", body, err)
		}
		if body, err := fetch("198.19.86.1", "api.allowed.test", true); err == nil {
			t.Errorf("after update: api.allowed.test passed: %q", body)
		}
	})
	// No domains: the redirect stops, deny-all drops port 443 and DNS.
	if err := m.SetEgress(ctx, id, Egress{Deny: deny, Internet: true}); err != nil {
		t.Fatal(err)
	}
	reach(t, n, "198.19.86.1:443", false)
	in(func() {
		if _, _, err := lookupAt("198.19.86.53", "other.allowed.test"); err == nil {
			t.Error("DNS answered after the domains were removed")
		}
	})
	// Without WithEgressProxy, domain rules are refused, not ignored.
	m2 := testManagerScope(t, "moattf", "tf", "10.206.0.0/16")
	id2 := testID(t)
	if err := m2.SetEgress(ctx, id2, Egress{Deny: deny, Domains: []string{"x.test"}}); err != nil {
		t.Fatal(err) // before Setup it is only recorded
	}
	if _, err := m2.Setup(ctx, id2, true); !errors.Is(err, ErrDomainUnsupported) {
		_ = m2.Teardown(ctx, id2)
		t.Errorf("Setup with domain rules and no egress proxy: %v", err)
	}
}
