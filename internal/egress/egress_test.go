package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func TestRulesMatch(t *testing.T) {
	r := ParseRules([]string{"api.allowed.test", "*.wild.test", "Case.Test."})
	for name, want := range map[string]bool{
		"api.allowed.test":       true,
		"API.Allowed.Test.":      true,
		"allowed.test":           false,
		"x.api.allowed.test":     false,
		"a.wild.test":            true,
		"a.b.wild.test":          true,
		"wild.test":              false,
		"evilwild.test":          false,
		"wild.test.evil":         false,
		"case.test":              true,
		"":                       false,
		"api.allowed.test.evil.": false,
	} {
		if got := r.Match(name); got != want {
			t.Errorf("Match(%q) = %v, want %v", name, got, want)
		}
	}
}

// clientHello returns the first record a crypto/tls client sends for sni.
func clientHello(t testing.TB, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake() //nolint:errcheck
	}()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	rec, _, err := readClientHello(b)
	if err != nil && !errors.Is(err, errNotClientHello) {
		t.Fatalf("readClientHello: %v", err)
	}
	return rec
}

func TestServerName(t *testing.T) {
	for _, sni := range []string{"api.allowed.test", "x.y.wild.test"} {
		rec := clientHello(t, sni)
		got, err := ServerName(rec)
		if err != nil || got != sni {
			t.Fatalf("ServerName = %q, %v; want %q", got, err, sni)
		}
		// Every truncation is refused, never misread.
		for i := 0; i < len(rec); i++ {
			if n, err := ServerName(rec[:i]); err == nil {
				t.Fatalf("truncated to %d: got %q", i, n)
			}
		}
	}
	// An IP literal as ServerName is not sent by crypto/tls: no SNI at all.
	rec := clientHello(t, "198.19.91.10")
	if n, err := ServerName(rec); err == nil {
		t.Fatalf("no SNI: got %q", n)
	}
	if _, err := ServerName([]byte("GET / HTTP/1.1\r\n\r\n")); err == nil {
		t.Fatal("HTTP accepted as TLS")
	}
}

func FuzzServerName(f *testing.F) {
	f.Add(clientHello(f, "api.allowed.test"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := ServerName(b)
		if err == nil && !validName(name) {
			t.Fatalf("invalid name %q accepted", name)
		}
		rec, name2, err2 := readClientHello(bytes.NewReader(b))
		if len(rec) > maxRecord {
			t.Fatalf("read %d bytes", len(rec))
		}
		if err2 == nil && !validName(name2) {
			t.Fatalf("invalid name %q accepted", name2)
		}
	})
}

func TestHostOf(t *testing.T) {
	for head, want := range map[string]string{
		"GET / HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n":                         "api.allowed.test",
		"GET / HTTP/1.1\r\nhost: API.allowed.test:8080\r\n\r\n":                    "api.allowed.test",
		"GET http://api.allowed.test/x HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n": "api.allowed.test",
		"GET http://api.allowed.test/x HTTP/1.1\r\n\r\n":                           "api.allowed.test",
		"GET http://evil.test/x HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n":        "",
		"GET / HTTP/1.1\r\nHost: api.allowed.test\r\nHost: evil.test\r\n\r\n":      "",
		"GET / HTTP/1.1\r\n\r\n":                                                   "",
		"GET / HTTP/1.1\r\nHost: 198.19.91.10\r\n\r\n":                             "",
		"GET / HTTP/1.1\r\nHost: user@api.allowed.test\r\n\r\n":                    "",
		"GET / HTTP/1.1\r\nHost : api.allowed.test\r\n\r\n":                        "",
		"\x16\x03\x01": "",
		"GET / HTTP/2.0\r\nHost: api.allowed.test\r\n\r\n": "",
	} {
		got, err := HostOf([]byte(head))
		if want == "" {
			if err == nil {
				t.Errorf("HostOf(%q) = %q, want error", head, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("HostOf(%q) = %q, %v; want %q", head, got, err, want)
		}
	}
	_, _, err := readHead(strings.NewReader("GET / HTTP/1.1\r\nX: " + strings.Repeat("a", maxHead) + "\r\n\r\n"))
	if err == nil {
		t.Fatal("oversized head accepted")
	}
}

// fakeUpstream answers A queries for names in zone over UDP on loopback,
// and counts the queries it saw (passing each to rec, when not nil).
func fakeUpstream(t *testing.T, zone map[string]netip.Addr, rec func([]byte)) (netip.AddrPort, *atomic.Int32) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	seen := new(atomic.Int32)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			seen.Add(1)
			if rec != nil {
				rec(append([]byte(nil), buf[:n]...))
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, _ := p.Question()
			a, ok := zone[strings.ToLower(q.Name.String())]
			rh := dnsmessage.Header{ID: h.ID, Response: true}
			if !ok {
				rh.RCode = dnsmessage.RCodeNameError
			}
			b := dnsmessage.NewBuilder(nil, rh)
			b.StartQuestions()
			b.Question(q)
			b.StartAnswers()
			if ok && q.Type == dnsmessage.TypeA {
				b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 300}, dnsmessage.AResource{A: a.As4()})
			}
			out, _ := b.Finish()
			pc.WriteTo(out, from)
		}
	}()
	return netip.MustParseAddrPort(pc.LocalAddr().String()), seen
}

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 4242, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func rcodeOf(t *testing.T, resp []byte) (dnsmessage.RCode, []netip.Addr) {
	t.Helper()
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil || h.ID != 4242 || !h.Response {
		t.Fatalf("bad response: %v %+v", err, h)
	}
	p.SkipAllQuestions()
	rrs, _ := p.AllAnswers()
	var as []netip.Addr
	for _, rr := range rrs {
		if a, ok := rr.Body.(*dnsmessage.AResource); ok {
			as = append(as, netip.AddrFrom4(a.A))
		}
	}
	return h.RCode, as
}

func TestResolverPolicy(t *testing.T) {
	ip := netip.MustParseAddr("198.19.91.10")
	up, seen := fakeUpstream(t, map[string]netip.Addr{"api.allowed.test.": ip, "other.allowed.test.": ip, "x.wild.test.": ip}, nil)
	tab := NewTable()
	sb := netip.MustParseAddr("10.200.0.2")
	tab.Set(sb, ParseRules([]string{"api.allowed.test", "*.wild.test"}))
	r := &Resolver{Table: tab, Upstreams: []netip.AddrPort{up}}
	ctx := context.Background()

	rc, as := rcodeOf(t, r.Answer(ctx, sb, query(t, "API.allowed.test.", dnsmessage.TypeA), false))
	if rc != dnsmessage.RCodeSuccess || len(as) != 1 || as[0] != ip {
		t.Fatalf("allowed name: %v %v", rc, as)
	}
	if !tab.Permit(sb, "api.allowed.test", ip) {
		t.Fatal("resolved address not permitted")
	}
	if tab.Permit(sb, "api.allowed.test", netip.MustParseAddr("198.19.91.11")) {
		t.Fatal("unresolved address permitted")
	}
	before := seen.Load()
	for _, n := range []string{"other.allowed.test.", "exfil-data.evil.test.", "wild.test."} {
		rc, _ := rcodeOf(t, r.Answer(ctx, sb, query(t, n, dnsmessage.TypeA), false))
		if rc != dnsmessage.RCodeNameError {
			t.Fatalf("%s: rcode %v, want NXDOMAIN", n, rc)
		}
	}
	if seen.Load() != before {
		t.Fatal("a refused name reached the upstream")
	}
	if rc, _ := rcodeOf(t, r.Answer(ctx, sb, query(t, "x.wild.test.", dnsmessage.TypeA), false)); rc != dnsmessage.RCodeSuccess {
		t.Fatalf("wildcard: %v", rc)
	}
	// A source without rules is refused outright.
	if rc, _ := rcodeOf(t, r.Answer(ctx, netip.MustParseAddr("10.200.0.6"), query(t, "api.allowed.test.", dnsmessage.TypeA), false)); rc != dnsmessage.RCodeRefused {
		t.Fatalf("unknown source: %v", rc)
	}
	// A live update drops names no longer allowed, keeps the others' addresses.
	tab.Set(sb, ParseRules([]string{"*.wild.test"}))
	if tab.Permit(sb, "api.allowed.test", ip) || !tab.Permit(sb, "x.wild.test", ip) {
		t.Fatal("update did not replace the rules")
	}
	tab.Set(sb, Rules{})
	if tab.lookup(sb) != nil {
		t.Fatal("empty rules kept")
	}
}

// TestResolverForwardsOnlyTheQuestion: a query for an allowed name that
// carries data elsewhere (an additional TXT record named after a secret,
// an EDNS option holding it, header bits) reaches
// the upstream as the bare question, so the secret never leaves the host.
// Before the fix the sandbox's query was forwarded verbatim.
func TestResolverForwardsOnlyTheQuestion(t *testing.T) {
	ip := netip.MustParseAddr("198.19.91.10")
	got := make(chan []byte, 4)
	up, _ := fakeUpstream(t, map[string]netip.Addr{"api.allowed.test.": ip}, func(b []byte) { got <- b })
	tab := NewTable()
	sb := netip.MustParseAddr("10.200.0.2")
	tab.Set(sb, ParseRules([]string{"api.allowed.test"}))
	r := &Resolver{Table: tab, Upstreams: []netip.AddrPort{up}}
	const secret = "s3cr3t-exfil-label"

	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 4242, RecursionDesired: true, CheckingDisabled: true, AuthenticData: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("api.allowed.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	b.StartAdditionals()
	b.TXTResource(dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(secret + ".exfil.test."), Class: dnsmessage.ClassINET},
		dnsmessage.TXTResource{TXT: []string{secret}})
	var opt dnsmessage.ResourceHeader
	opt.SetEDNS0(1232, dnsmessage.RCodeSuccess, true)
	b.OPTResource(opt, dnsmessage.OPTResource{Options: []dnsmessage.Option{{Code: 65001, Data: []byte(secret)}}})
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if rc, as := rcodeOf(t, r.Answer(context.Background(), sb, q, false)); rc != dnsmessage.RCodeSuccess || len(as) != 1 {
		t.Fatalf("allowed name: %v %v", rc, as)
	}
	sent := <-got
	if strings.Contains(string(sent), secret) {
		t.Fatalf("the secret reached the upstream: %q", sent)
	}
	want, _ := upstreamQuery(dnsmessage.Question{Name: dnsmessage.MustNewName("api.allowed.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	if string(sent[2:]) != string(want[2:]) { // all but the (random) ID
		t.Fatalf("upstream got %x, want the bare question %x", sent, want)
	}
}

// TestProxy runs the proxy on loopback with a fake original destination:
// an allowed name resolved to the destination passes (TLS and HTTP),
// everything else is closed without reaching it.
func TestProxy(t *testing.T) {
	var hits atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "hello "+r.Host)
	})}
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(backend)
	t.Cleanup(func() { srv.Close() })

	tab := NewTable()
	lo := netip.MustParseAddr("127.0.0.1")
	tab.Set(lo, ParseRules([]string{"api.allowed.test"}))
	var orig atomic.Pointer[netip.AddrPort]
	setOrig := func(a string) { ap := netip.MustParseAddrPort(a); orig.Store(&ap) }
	setOrig("198.19.91.10:80")
	fakeDst := netip.MustParseAddr("198.19.91.10")
	p := &Proxy{Table: tab,
		OriginalDst: func(net.Conn) (netip.AddrPort, error) { return *orig.Load(), nil },
		Blocked:     func(a netip.Addr) bool { return a.IsPrivate() },
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, backend.Addr().String())
		}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(l)
	t.Cleanup(func() { l.Close() })

	get := func(host string) (string, error) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		b, err := io.ReadAll(c)
		return string(b), err
	}
	if b, _ := get("api.allowed.test"); b != "" {
		t.Fatalf("unresolved destination passed: %q", b)
	}
	tab.remember(lo, "api.allowed.test", []netip.Addr{fakeDst}, time.Minute)
	if b, _ := get("api.allowed.test"); !strings.Contains(b, "hello api.allowed.test") {
		t.Fatalf("allowed: %q", b)
	}
	tab.remember(lo, "other.allowed.test", []netip.Addr{fakeDst}, time.Minute)
	for _, h := range []string{"other.allowed.test", "198.19.91.10"} {
		if b, _ := get(h); b != "" {
			t.Fatalf("%s passed: %q", h, b)
		}
	}
	if hits.Load() != 1 {
		t.Fatalf("backend saw %d requests, want 1", hits.Load())
	}
	// TLS: the ClientHello is replayed whole; a mismatched SNI is cut.
	setOrig("198.19.91.10:443")
	for sni, want := range map[string]bool{"api.allowed.test": true, "other.allowed.test": false} {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(clientHello(t, sni))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		c.Close()
		// The backend speaks HTTP: a replayed ClientHello gets a 400 back.
		if got := len(b) > 0; got != want {
			t.Fatalf("SNI %s: got %d bytes back, want passed=%v", sni, len(b), want)
		}
	}
	// A live update that drops the name cuts its spliced connections.
	setOrig("198.19.91.10:80")
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	if n, err := c.Read(buf); err != nil || !strings.Contains(string(buf[:n]), "hello api.allowed.test") {
		t.Fatalf("keep-alive request: %q %v", buf[:n], err)
	}
	tab.Set(lo, ParseRules([]string{"api.allowed.test", "other.allowed.test"}))
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection to a still allowed name ended: %v", err)
	}
	tab.Set(lo, ParseRules([]string{"other.allowed.test"}))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("connection survived the removal of its name: %q", buf[:n])
	}
	tab.Set(lo, ParseRules([]string{"api.allowed.test"}))

	// Blocked destinations are refused even for allowed, resolved names.
	setOrig("10.1.2.3:80")
	tab.remember(lo, "api.allowed.test", []netip.Addr{netip.MustParseAddr("10.1.2.3")}, time.Minute)
	if b, _ := get("api.allowed.test"); b != "" {
		t.Fatalf("blocked destination passed: %q", b)
	}
}

func FuzzHostOf(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"))
	f.Add([]byte("GET http://a.test/ HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := HostOf(b); err == nil && (!validName(h) || net.ParseIP(h) != nil) {
			t.Fatalf("invalid host %q accepted", h)
		}
	})
}

// TestResolverRetransmitsLostQueries: an upstream that loses the first
// datagram (a loaded host, a dropped packet) still answers within the
// attempt's timeout, since the query is sent again.
func TestResolverRetransmitsLostQueries(t *testing.T) {
	old := udpRetransmit
	udpRetransmit = 100 * time.Millisecond
	t.Cleanup(func() { udpRetransmit = old })
	ip := netip.MustParseAddr("198.19.91.10")
	var n atomic.Int32
	up, _ := fakeUpstream(t, map[string]netip.Addr{"api.allowed.test.": ip}, func([]byte) { n.Add(1) })
	// a relay in front of the upstream that drops the first query
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for i := 0; ; i++ {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if i == 0 {
				continue
			}
			c, err := net.Dial("udp", up.String())
			if err != nil {
				return
			}
			c.Write(buf[:k])
			c.SetReadDeadline(time.Now().Add(time.Second))
			resp := make([]byte, 1500)
			if m, err := c.Read(resp); err == nil {
				pc.WriteTo(resp[:m], from)
			}
			c.Close()
		}
	}()
	tab := NewTable()
	sb := netip.MustParseAddr("10.200.0.2")
	tab.Set(sb, ParseRules([]string{"api.allowed.test"}))
	r := &Resolver{Table: tab, Upstreams: []netip.AddrPort{netip.MustParseAddrPort(pc.LocalAddr().String())}}
	q, _ := upstreamQuery(dnsmessage.Question{Name: dnsmessage.MustNewName("api.allowed.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q[0], q[1] = 4242>>8, 4242&0xff // rcodeOf's ID
	if rc, as := rcodeOf(t, r.Answer(context.Background(), sb, q, false)); rc != dnsmessage.RCodeSuccess || len(as) != 1 {
		t.Fatalf("after a lost query: %v %v", rc, as)
	}
	if n.Load() != 1 {
		t.Fatalf("the upstream got %d queries, want the second one only", n.Load())
	}
}
