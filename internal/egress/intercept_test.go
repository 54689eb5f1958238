package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/egress/inject"
	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/errdefs"
)

// testPKI is an upstream's own CA (as a private CA or the public web PKI
// would be) and a server certificate it signed for names.
func testPKI(t *testing.T, names ...string) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), DNSNames: names, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// fakeSecrets is a team's secrets as secrets.Service gives them.
type fakeSecrets struct {
	mu sync.Mutex
	m  map[string]string // team/name -> value
}

func (f *fakeSecrets) Value(_ context.Context, team, name string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.m[team+"/"+name]
	if !ok {
		return nil, fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	return []byte(v), nil
}

func (f *fakeSecrets) set(team, name, v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v == "" {
		delete(f.m, team+"/"+name)
		return
	}
	f.m[team+"/"+name] = v
}

// seen is one request as the upstream received it.
type seen struct {
	host    string
	headers http.Header
	body    string
}

// interceptEnv is a proxy on loopback whose every original destination is
// 198.19.91.10 (port 80 or 443 as the test says) and whose dials reach a
// local upstream: HTTPS with a certificate of its own test CA for the
// test's names, and plain HTTP.
type interceptEnv struct {
	t        *testing.T
	tab      *Table
	src      netip.Addr
	ca       *tlsca.CA
	secrets  *fakeSecrets
	proxy    net.Listener // connections to it had 198.19.91.10:443 as original destination
	proxy80  net.Listener // and to this one 198.19.91.10:80
	upstream *httptest.Server
	leafDER  []byte
	streamed chan struct{} // the client read /stream's first part
	mu       sync.Mutex
	got      []seen
}

var fakeDst = netip.MustParseAddr("198.19.91.10")

func newInterceptEnv(t *testing.T, roots func(upstream *x509.CertPool) *x509.CertPool) *interceptEnv {
	t.Helper()
	e := &interceptEnv{t: t, tab: NewTable(), src: netip.MustParseAddr("127.0.0.1"),
		secrets: &fakeSecrets{m: map[string]string{}}, streamed: make(chan struct{}, 1)}
	pool, cert := testPKI(t, "api.inject.test", "*.inject.test", "*.b.inject.test", "other.test")
	e.leafDER = cert.Certificate[0]
	e.upstream = httptest.NewUnstartedServer(http.HandlerFunc(e.serveUpstream))
	e.upstream.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	e.upstream.StartTLS()
	t.Cleanup(e.upstream.Close)
	plainUp := httptest.NewServer(http.HandlerFunc(e.serveUpstream))
	t.Cleanup(plainUp.Close)

	var err error
	if e.ca, err = tlsca.LoadOrCreate(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	upAddr := e.upstream.Listener.Addr().String()
	dialUp := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != fakeDst.String()+":443" && addr != fakeDst.String()+":80" {
			return nil, fmt.Errorf("dial of %s: only the permitted destination may be dialled", addr)
		}
		to := upAddr
		if strings.HasSuffix(addr, ":80") {
			to = plainUp.Listener.Addr().String()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, to)
	}
	srv := inject.New(inject.Config{Leaf: e.ca.Leaf, Secrets: e.secrets, Roots: roots(pool), Dial: dialUp})
	t.Cleanup(func() { srv.Close() })
	p := &Proxy{Table: e.tab, Inject: srv, Dial: dialUp,
		OriginalDst: func(c net.Conn) (netip.AddrPort, error) {
			if c.LocalAddr().String() == e.proxy80.Addr().String() {
				return netip.AddrPortFrom(fakeDst, 80), nil
			}
			return netip.AddrPortFrom(fakeDst, 443), nil
		}}
	for _, l := range []*net.Listener{&e.proxy, &e.proxy80} {
		if *l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		go p.Serve(*l)
		t.Cleanup(func() { (*l).Close() })
	}
	return e
}

func (e *interceptEnv) serveUpstream(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stream" { // one part, then the next only once the client has read it
		io.WriteString(w, "part1\n")
		http.NewResponseController(w).Flush()
		select {
		case <-e.streamed:
		case <-time.After(5 * time.Second):
			return
		}
		io.WriteString(w, "part2\n")
		return
	}
	if r.Header.Get("Upgrade") == "echo" {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		rw.Flush()
		io.Copy(c, rw) // echo until the client closes
		return
	}
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.got = append(e.got, seen{host: r.Host, headers: r.Header.Clone(), body: string(body)})
	e.mu.Unlock()
	sum := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	fmt.Fprintf(w, "ok %x len=%d", sum, len(body))
}

// requests returns what the upstream saw since the last call.
func (e *interceptEnv) requests() []seen {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.got
	e.got = nil
	return out
}

// client returns an HTTP client whose connections all go through the
// proxy with the given original destination port, trusting only roots.
func (e *interceptEnv) client(roots *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			to := e.proxy.Addr().String()
			if _, port, _ := net.SplitHostPort(addr); port == "80" {
				to = e.proxy80.Addr().String()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, to)
		}}}
}

// dialTLS opens a TLS connection through the proxy (port 443) with SNI
// name, verified against roots (nil: not verified), closed at cleanup.
func (e *interceptEnv) dialTLS(name string, roots *x509.CertPool) *tls.Conn {
	e.t.Helper()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second},
		Config: &tls.Config{ServerName: name, RootCAs: roots, InsecureSkipVerify: roots == nil}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", e.proxy.Addr().String())
	if err != nil {
		e.t.Fatalf("TLS to %s through the proxy: %v", name, err)
	}
	e.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c.(*tls.Conn)
}

func (e *interceptEnv) moatRoots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(e.ca.CertPEM())
	return p
}

func (e *interceptEnv) allow(policy Policy) {
	e.tab.SetPolicy(e.src, policy)
	for _, n := range []string{"api.inject.test", "c.inject.test", "a.b.inject.test", "other.test"} {
		e.tab.remember(e.src, n, []netip.Addr{fakeDst}, time.Minute)
	}
}

func do(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, c, req)
}

const bearerRule = "Bearer ${e2b.secrets.k}"

func rulePolicy(headers map[string]string) Policy {
	return Policy{Domains: []string{"api.inject.test", "*.inject.test", "other.test"}, Team: "t1",
		Headers: []inject.Rule{{Domain: "api.inject.test", Headers: headers}}}
}

// TestInterceptSetsHeaders: HTTPS to a rule domain is terminated with a
// leaf of Moat's CA and forwarded to the permitted destination with the
// rule's headers, the sandbox's own of the same name replaced and the
// placeholder filled from the team's current secret (an update is used by
// the next request on the same connection); the sandbox gets the
// upstream's answer.
func TestInterceptSetsHeaders(t *testing.T) {
	e := newInterceptEnv(t, func(up *x509.CertPool) *x509.CertPool { return up })
	e.secrets.set("t1", "k", "v1-secret")
	e.secrets.set("t2", "k", "other-team")
	e.allow(rulePolicy(map[string]string{"Authorization": bearerRule, "X-Literal": "lit"}))
	c := e.client(e.moatRoots())

	st, body := get(t, c, "https://api.inject.test/path?q=1", "Authorization", "sandbox-own", "X-Mine", "kept")
	sum := sha256.Sum256([]byte("Bearer v1-secret"))
	if st != 200 || body != fmt.Sprintf("ok %x len=0", sum) {
		t.Fatalf("answer %d %q", st, body)
	}
	got := e.requests()
	if len(got) != 1 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	h := got[0].headers
	if v := h.Values("Authorization"); len(v) != 1 || v[0] != "Bearer v1-secret" {
		t.Fatalf("Authorization upstream = %q", v)
	}
	if h.Get("X-Literal") != "lit" || h.Get("X-Mine") != "kept" || got[0].host != "api.inject.test" {
		t.Fatalf("upstream saw host %q headers %v", got[0].host, h)
	}
	if h.Get("X-Forwarded-For") != "" {
		t.Fatalf("proxy added X-Forwarded-For %q", h.Get("X-Forwarded-For"))
	}

	// The next request on the same connection uses the updated value; a
	// chunked body streams through.
	e.secrets.set("t1", "k", "v2-secret")
	req, _ := http.NewRequest("POST", "https://api.inject.test/upload", io.MultiReader(strings.NewReader("part1-"), strings.NewReader("part2")))
	req.ContentLength = -1
	if st, body := do(t, c, req); st != 200 || !strings.HasSuffix(body, "len=11") {
		t.Fatalf("chunked POST: %d %q", st, body)
	}
	if got := e.requests(); len(got) != 1 || got[0].headers.Get("Authorization") != "Bearer v2-secret" || got[0].body != "part1-part2" {
		t.Fatalf("after update upstream saw %+v", got)
	}
}

// TestInterceptRefusals: a Host other than the SNI name is 421, a
// placeholder of a secret that is gone is 502 naming it, and neither
// reaches the upstream; plain HTTP to a rule domain is 403, never
// forwarded without its header.
func TestInterceptRefusals(t *testing.T) {
	e := newInterceptEnv(t, func(up *x509.CertPool) *x509.CertPool { return up })
	e.allow(rulePolicy(map[string]string{"Authorization": bearerRule}))
	c := e.client(e.moatRoots())

	// SNI api.inject.test, Host other.test.
	conn := e.dialTLS("api.inject.test", e.moatRoots())
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("Host != SNI: %v %v", resp, err)
	}

	// The secret does not exist (deleted after the rules were set).
	st, body := get(t, c, "https://api.inject.test/", "Authorization", "sandbox-own")
	if st != http.StatusBadGateway || !strings.Contains(body, `secret "k"`) || strings.Contains(body, "${") {
		t.Fatalf("missing secret: %d %q", st, body)
	}
	// Plain HTTP to the rule domain.
	st, body = get(t, c, "http://api.inject.test/")
	if st != http.StatusForbidden || !strings.Contains(body, "HTTPS only") {
		t.Fatalf("plain HTTP: %d %q", st, body)
	}
	if got := e.requests(); len(got) != 0 {
		t.Fatalf("refused requests reached the upstream: %+v", got)
	}
	// Plain HTTP to an allowed name without rules still passes.
	if st, _ := get(t, c, "http://other.test/"); st != 200 {
		t.Fatalf("plain HTTP without rules: %d", st)
	}
}

// TestInterceptUpstreamUnverified: when the upstream's certificate does not
// verify against Moat's roots, the sandbox gets 502 and nothing is sent.
func TestInterceptUpstreamUnverified(t *testing.T) {
	e := newInterceptEnv(t, func(*x509.CertPool) *x509.CertPool { return x509.NewCertPool() })
	e.secrets.set("t1", "k", "v1-secret")
	e.allow(rulePolicy(map[string]string{"Authorization": bearerRule}))
	st, body := get(t, e.client(e.moatRoots()), "https://api.inject.test/")
	if st != http.StatusBadGateway || !strings.Contains(body, "did not verify") {
		t.Fatalf("unverified upstream: %d %q", st, body)
	}
	if got := e.requests(); len(got) != 0 {
		t.Fatalf("upstream saw %+v", got)
	}
}

// TestNoRulesSpliced: a name without rules is spliced as before: the
// sandbox sees the upstream's own certificate, not one of Moat's CA.
func TestNoRulesSpliced(t *testing.T) {
	e := newInterceptEnv(t, func(up *x509.CertPool) *x509.CertPool { return up })
	e.allow(rulePolicy(map[string]string{"X-A": "a"}))
	conn := e.dialTLS("other.test", nil)
	if got := conn.ConnectionState().PeerCertificates[0].Raw; !bytes.Equal(got, e.leafDER) {
		t.Fatal("a name without rules was intercepted: not the upstream's certificate")
	}
	// And the rule domain shows Moat's leaf.
	e.dialTLS("api.inject.test", e.moatRoots()) // fails the test unless Moat's CA verifies it
}

// TestInterceptPrecedence: the exact rule beats wildcards, the longer
// wildcard suffix the shorter one.
func TestInterceptPrecedence(t *testing.T) {
	e := newInterceptEnv(t, func(up *x509.CertPool) *x509.CertPool { return up })
	e.allow(Policy{Domains: []string{"*.inject.test", "api.inject.test"}, Team: "t1", Headers: []inject.Rule{
		{Domain: "*.inject.test", Headers: map[string]string{"X-Rule": "wild"}},
		{Domain: "api.inject.test", Headers: map[string]string{"X-Rule": "exact"}},
		{Domain: "*.b.inject.test", Headers: map[string]string{"X-Rule": "long"}},
	}})
	c := e.client(e.moatRoots())
	for host, want := range map[string]string{"api.inject.test": "exact", "c.inject.test": "wild", "a.b.inject.test": "long"} {
		if st, body := get(t, c, "https://"+host+"/", "X-Rule", "sandbox"); st != 200 {
			t.Fatalf("%s: %d %q", host, st, body)
		}
		got := e.requests()
		if len(got) != 1 || got[0].headers.Get("X-Rule") != want || got[0].host != host {
			t.Fatalf("%s: upstream saw %+v, want X-Rule %s", host, got, want)
		}
	}
}

// TestInterceptLiveUpdate: on one kept-alive connection, the next request
// uses rules replaced meanwhile; rules removed for a still allowed name
// leave the connection up (requests then pass unchanged); the name
// removed from allowOut closes it.
func TestInterceptLiveUpdate(t *testing.T) {
	e := newInterceptEnv(t, func(up *x509.CertPool) *x509.CertPool { return up })
	e.allow(rulePolicy(map[string]string{"X-Rule": "one"}))
	conn := e.dialTLS("api.inject.test", e.moatRoots())
	br := bufio.NewReader(conn)
	ask := func() (int, error) {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: api.inject.test\r\nX-Rule: sandbox\r\n\r\n"); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	rule := func() string {
		got := e.requests()
		if len(got) != 1 {
			t.Fatalf("upstream saw %d requests", len(got))
		}
		return got[0].headers.Get("X-Rule")
	}
	if st, err := ask(); err != nil || st != 200 || rule() != "one" {
		t.Fatalf("first request: %d %v", st, err)
	}
	e.tab.SetPolicy(e.src, rulePolicy(map[string]string{"X-Rule": "two"}))
	if st, err := ask(); err != nil || st != 200 || rule() != "two" {
		t.Fatalf("after replacement: %d %v", st, err)
	}
	e.tab.SetPolicy(e.src, Policy{Domains: []string{"api.inject.test"}, Team: "t1"})
	if st, err := ask(); err != nil || st != 200 || rule() != "sandbox" {
		t.Fatalf("after the rule's removal: %d %v", st, err)
	}
	e.tab.SetPolicy(e.src, Policy{Domains: []string{"other.test"}})
	if st, err := ask(); err == nil {
		t.Fatalf("connection survived its name's removal: %d", st)
	}
}

// TestInterceptUpgrade: a 101 answer switches the connection to the
// upstream's protocol both ways.
func TestInterceptUpgrade(t *testing.T) {
	e := newInterceptEnv(t, func(up *x509.CertPool) *x509.CertPool { return up })
	e.allow(rulePolicy(map[string]string{"X-A": "a"}))
	conn := e.dialTLS("api.inject.test", e.moatRoots())
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: api.inject.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(conn, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo after upgrade: %q %v", buf, err)
	}
}

// TestInterceptStreams: a response reaches the sandbox as the upstream
// writes it, not once it ends.
func TestInterceptStreams(t *testing.T) {
	e := newInterceptEnv(t, func(up *x509.CertPool) *x509.CertPool { return up })
	e.allow(rulePolicy(map[string]string{"X-A": "a"}))
	resp, err := e.client(e.moatRoots()).Get("https://api.inject.test/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "part1\n" {
		t.Fatalf("first part: %q %v (buffered until the end?)", line, err)
	}
	e.streamed <- struct{}{}
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "part2\n" {
		t.Fatalf("second part: %q %v", rest, err)
	}
}
