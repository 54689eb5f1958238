package inject

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// Secrets gives the egress proxy a team's secret values (secrets.Service).
type Secrets interface {
	// Value decrypts the current value of team's secret name; an unknown
	// secret is an error wrapping errdefs.ErrNotFound.
	Value(ctx context.Context, team, name string) ([]byte, error)
}

// Conn is what the proxy knows of a connection it hands over.
type Conn struct {
	// Name is the server name of the sandbox's ClientHello: the only host
	// its requests may name and the name Moat verifies upstream.
	Name string
	// Dst is the connection's original destination, which the proxy
	// permitted for Name: the only address dialled.
	Dst netip.AddrPort
	// Policy returns, as the sandbox's policy says at the time of the
	// call, whose secrets the rules name, the headers to set for Name (nil:
	// no rule any more; requests pass unchanged), and whether Name is still
	// allowed at all.
	Policy func() (team string, headers map[string]string, allowed bool)
}

// Config configures a Server.
type Config struct {
	// Leaf returns the certificate shown to the sandbox for a name
	// (tlsca.CA.Leaf).
	Leaf    func(name string) (*tls.Certificate, error)
	Secrets Secrets
	// Roots verify upstream servers; nil means the system pool.
	Roots *x509.CertPool
	// Dial connects to an upstream address; nil means a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Blocked reports destinations never dialled (checked again before
	// every upstream connection); nil blocks nothing.
	Blocked func(netip.Addr) bool
	Log     *slog.Logger
}

// Server serves intercepted connections. Close stops it.
type Server struct {
	cfg   Config
	ln    *connListener
	srv   *http.Server
	proxy *httputil.ReverseProxy
}

// Timeouts of the sandbox side (handshake, request head, idle keep-alive)
// and of an upstream connection's dial and handshake.
const (
	handshakeTimeout  = 10 * time.Second
	readHeaderTimeout = 30 * time.Second
	idleTimeout       = 5 * time.Minute
	dialTimeout       = 15 * time.Second
)

// New returns a Server that serves the connections handed to Serve.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, ln: newConnListener()}
	errLog := slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug)
	s.proxy = &httputil.ReverseProxy{Rewrite: rewrite, Transport: roundTripper{}, FlushInterval: -1,
		ErrorHandler: s.upstreamError, ErrorLog: errLog}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout: idleTimeout, ErrorLog: errLog, DisableGeneralOptionsHandler: true,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ic, ok := c.(*conn); ok {
				ctx = context.WithValue(ctx, stateKey{}, ic.st)
			}
			return ctx
		}}
	go s.srv.Serve(s.ln) //nolint:errcheck // ends with Close
	return s
}

// Close stops serving and closes every intercepted connection.
func (s *Server) Close() error { return s.srv.Close() }

// Serve completes the TLS handshake of c, whose first bytes (the
// ClientHello record the proxy read) are first, and serves its requests
// until the connection ends. It returns when c is done with.
func (s *Server) Serve(c net.Conn, first []byte, info Conn) {
	tc := tls.Server(&prefixConn{Conn: c, first: first}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cfg.Leaf(info.Name)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		s.cfg.Log.Debug("egress inject: handshake", "name", info.Name, "err", err)
		tc.Close()
		return
	}
	st := &connState{info: info, tr: s.transport(info)}
	defer st.tr.CloseIdleConnections()
	ic := &conn{Conn: tc, st: st, done: make(chan struct{})}
	if !s.ln.deliver(ic) {
		ic.Close()
		return
	}
	<-ic.done
}

// stateKey carries a request's *connState in its context; headersKey the
// headers to set (map[string]string).
type (
	stateKey   struct{}
	headersKey struct{}
)

// connState is one intercepted connection: what the proxy said of it and
// its own upstream transport (upstream connections are never shared
// between sandbox connections).
type connState struct {
	info Conn
	tr   *http.Transport
}

// serveHTTP checks one request, fills its headers and forwards it.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	st, _ := r.Context().Value(stateKey{}).(*connState)
	if st == nil {
		http.Error(w, "moat: no connection state", http.StatusInternalServerError)
		return
	}
	name := st.info.Name
	if r.Method == http.MethodConnect {
		plain(w, http.StatusMethodNotAllowed, "moat: CONNECT is not proxied to %s", name)
		return
	}
	if !sameHost(r.Host, name) {
		plain(w, http.StatusMisdirectedRequest, "moat: this TLS connection is for %s; a request for %q needs a connection of its own", name, r.Host)
		return
	}
	team, rules, allowed := st.info.Policy()
	if !allowed {
		w.Header().Set("Connection", "close")
		plain(w, http.StatusForbidden, "moat: %s is no longer allowed by this sandbox's network policy", name)
		return
	}
	set, status, msg := s.fill(r.Context(), team, name, rules)
	if status != 0 {
		plain(w, status, "%s", msg)
		return
	}
	s.cfg.Log.Debug("egress inject: request", "name", name, "method", r.Method, "headers", headerNames(set))
	s.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), headersKey{}, set)))
}

// fill resolves the rule's headers for one request. On failure it returns
// the status and a body that names a missing secret but never holds a
// value.
func (s *Server) fill(ctx context.Context, team, name string, rules map[string]string) (map[string]string, int, string) {
	set := make(map[string]string, len(rules))
	for k, v := range rules {
		filled, err := Fill(v, func(secret string) (string, error) {
			b, err := s.cfg.Secrets.Value(ctx, team, secret)
			if errdefs.IsNotFound(err) {
				return "", &MissingSecretError{Name: secret}
			}
			if err != nil {
				return "", fmt.Errorf("secret %q: %w", secret, err)
			}
			if strings.ContainsAny(string(b), "\r\n\x00") {
				return "", fmt.Errorf("secret %q contains CR, LF or NUL, which a header cannot hold", secret)
			}
			return string(b), nil
		})
		var missing *MissingSecretError
		switch {
		case errors.As(err, &missing):
			return nil, http.StatusBadGateway, fmt.Sprintf("moat: the network.rules for %s use secret %q, which does not exist "+
				"(deleted?); the request was not sent", name, missing.Name)
		case err != nil:
			s.cfg.Log.Warn("egress inject: header not filled; request refused", "name", name, "header", k, "err", err)
			return nil, http.StatusBadGateway, fmt.Sprintf("moat: header %s of the network.rules for %s could not be filled "+
				"(see the server log); the request was not sent", k, name)
		}
		set[k] = filled
	}
	return set, 0, ""
}

// forwardedHeaders are the ones ReverseProxy drops before Rewrite; the
// sandbox's own are passed on unchanged.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// rewrite aims the outgoing request at the connection's name and sets the
// rule's headers, replacing any the sandbox sent under those names.
func rewrite(pr *httputil.ProxyRequest) {
	st := pr.In.Context().Value(stateKey{}).(*connState)
	pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "https", st.info.Name, st.info.Name
	for _, h := range forwardedHeaders {
		if v, ok := pr.In.Header[h]; ok {
			pr.Out.Header[h] = v
		}
	}
	set, _ := pr.In.Context().Value(headersKey{}).(map[string]string)
	for k, v := range set {
		pr.Out.Header[http.CanonicalHeaderKey(k)] = []string{v}
	}
}

// roundTripper sends a request with its connection's transport.
type roundTripper struct{}

func (roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	st, ok := r.Context().Value(stateKey{}).(*connState)
	if !ok {
		return nil, errors.New("egress inject: request without connection state")
	}
	return st.tr.RoundTrip(r)
}

// transport is an HTTP/1.1 transport whose every connection is a verified
// TLS connection for info.Name to info.Dst.
func (s *Server) transport(info Conn) *http.Transport {
	return &http.Transport{
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return s.dialUpstream(ctx, info)
		},
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
		DisableCompression:    true,                                                   // bodies pass as they are
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// errUpstreamTLS marks a failed upstream handshake.
var errUpstreamTLS = errors.New("upstream TLS handshake failed")

func (s *Server) dialUpstream(ctx context.Context, info Conn) (net.Conn, error) {
	if s.cfg.Blocked != nil && s.cfg.Blocked(info.Dst.Addr()) {
		return nil, fmt.Errorf("destination %s is blocked", info.Dst)
	}
	if _, _, allowed := info.Policy(); !allowed {
		return nil, fmt.Errorf("%s is no longer allowed", info.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	dial := s.cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	raw, err := dial(ctx, "tcp", info.Dst.String())
	if err != nil {
		return nil, err
	}
	tc := tls.Client(raw, &tls.Config{ServerName: info.Name, RootCAs: s.cfg.Roots, NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("%w with %s (%s): %w", errUpstreamTLS, info.Name, info.Dst, err)
	}
	return tc, nil
}

// upstreamError answers 502 when the upstream could not be reached or
// verified.
func (s *Server) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	st, _ := r.Context().Value(stateKey{}).(*connState)
	name := ""
	if st != nil {
		name = st.info.Name
	}
	if r.Context().Err() != nil {
		return // the sandbox went away
	}
	var verr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &verr):
		s.cfg.Log.Info("egress inject: upstream certificate not verified", "name", name, "err", verr.Err)
		plain(w, http.StatusBadGateway, "moat: the TLS certificate of %s did not verify (%v); the request was not sent", name, verr.Err)
	case errors.Is(err, errUpstreamTLS):
		s.cfg.Log.Info("egress inject: upstream handshake", "name", name, "err", err)
		plain(w, http.StatusBadGateway, "moat: the TLS handshake with %s failed; the request was not sent", name)
	default:
		s.cfg.Log.Debug("egress inject: upstream", "name", name, "err", err)
		plain(w, http.StatusBadGateway, "moat: %s could not be reached through the egress proxy", name)
	}
}

// plain answers status with a one-line text body.
func plain(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, format+"\n", args...)
}

// sameHost reports whether a request's Host names name, on port 443 or
// none.
func sameHost(host, name string) bool {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		h, port = host, ""
	}
	if port != "" && port != "443" {
		return false
	}
	return strings.EqualFold(strings.TrimSuffix(h, "."), name)
}

func headerNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// prefixConn reads first before the rest of Conn.
type prefixConn struct {
	net.Conn
	first []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// conn is an intercepted connection as the HTTP server sees it; done is
// closed on its first Close (by the server, or by the reverse proxy after
// an upgrade).
type conn struct {
	net.Conn
	st   *connState
	once sync.Once
	done chan struct{}
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}

// connListener hands connections to the HTTP server one at a time.
type connListener struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

// deliver gives c to the server; false when the server has stopped.
func (l *connListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return &net.TCPAddr{} }
