// Package proxy is the sandbox front door: it routes HTTP traffic for a
// sandbox port (envd on 49983, the code interpreter on 49999, user ports) to
// the sandbox, chosen by the E2b-Sandbox-Id/E2b-Sandbox-Port headers or by a
// "{port}-{id}.{domain}" Host, and answers 502 JSON when the sandbox is gone
// so that the SDKs report "sandbox timed out / not running".
package proxy

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/dialrace"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// Header names the SDKs send on every sandbox request.
const (
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
	HeaderAccessToken = "X-Access-Token"
	// HeaderTrafficToken carries the trafficAccessToken of a sandbox
	// created with network.allowPublicTraffic: false.
	HeaderTrafficToken = "E2b-Traffic-Access-Token"
)

// Target is where a sandbox's traffic goes right now.
type Target struct {
	Addr       netip.Addr
	Token      string // envd access token ("" = none)
	State      string // "running", "paused", …
	AutoResume bool   // traffic may resume it when paused
	Gen        uint64 // changes whenever the sandbox's process or address may have (resume)
	// TrafficToken ("" = none) is required in HeaderTrafficToken on every
	// port but envd's, which keeps its own token.
	TrafficToken string
}

// Resolver finds a live sandbox; the orchestrator implements it.
type Resolver interface {
	Lookup(id string) (Target, bool)
	// Wake resumes a paused sandbox that allows auto-resume (waiting for
	// a pause or resume in progress) and returns where it now runs.
	Wake(ctx context.Context, id string) (Target, error)
}

// Config configures the proxy. Resolver is required.
type Config struct {
	Resolver Resolver
	Domain   string // when set, Host routing requires this suffix
	EnvdPort int    // default 49983
	Logger   *slog.Logger
	// Explain, when set, describes how the host reaches a sandbox's
	// address now (netpolicy.Explain); a request to a sandbox still there
	// that fails for another reason than a refused connection or a gone
	// client logs it.
	Explain func(netip.Addr) string
}

// Proxy is an http.Handler.
type Proxy struct {
	cfg  Config
	log  *slog.Logger
	rp   *httputil.ReverseProxy
	open openSet // requests in flight and upstream connections, per sandbox
}

// envdInternal are envd paths only the orchestrator may call.
var envdInternal = map[string]bool{"/init": true, "/freeze": true, "/unfreeze": true, "/snapshot": true}

// New returns a proxy.
func New(cfg Config) *Proxy {
	if cfg.EnvdPort == 0 {
		cfg.EnvdPort = 49983
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{cfg: cfg, log: cfg.Logger}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		// Connections are pooled per sandbox ID (the URL host), not per
		// address: a killed sandbox's address is soon reused by a new one,
		// and an idle connection to the old one would be reset.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			t, ok := ctx.Value(ctxKey{}).(route)
			if !ok {
				return nil, errors.New("proxy: dial without a sandbox route")
			}
			dial := func(ctx context.Context) (net.Conn, error) { return dialer.DialContext(ctx, network, t.hostPort()) }
			c, err := dialrace.Dial(ctx, dial, dialrace.Stall, func() {
				attrs := []any{"sandboxID", t.id, "port", t.port}
				if p.cfg.Explain != nil {
					attrs = append(attrs, "network", p.cfg.Explain(t.addr))
				}
				p.log.Warn("connect to sandbox stalled; racing a second one", attrs...)
			})
			if err != nil {
				return nil, err
			}
			return p.open.track(t.id, c), nil
		},
		MaxIdleConns:          1000,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // long-running RPC streams
	}
	p.rp = &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := targetFrom(pr.In)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = t.poolKey()
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del("X-API-KEY")
			pr.Out.Header.Del(HeaderTrafficToken)
		},
		ErrorHandler: p.proxyError,
		// A stream cut by CloseSandbox or a client going away is routine.
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	return p
}

// route is where one request goes.
type route struct {
	id   string
	port int
	addr netip.Addr
	gen  uint64
}

func (t route) hostPort() string { return net.JoinHostPort(t.addr.String(), strconv.Itoa(t.port)) }

// poolKey names the upstream for the transport's connection pool: the
// sandbox and its generation, so that connections to a sandbox from before
// a pause are never reused after its resume.
func (t route) poolKey() string {
	return net.JoinHostPort(t.id+"-"+strconv.FormatUint(t.gen, 10)+".sandbox", strconv.Itoa(t.port))
}

type ctxKey struct{}

func targetFrom(r *http.Request) route { return r.Context().Value(ctxKey{}).(route) }

var idRE = regexp.MustCompile(`^[a-z0-9]+$`)

// ParseHost parses "{port}-{id}[-{clientID}].{domain}[:{listenPort}]".
func ParseHost(host, domain string) (port int, id string, ok bool) {
	port, id, ok = parseHost(host, domain)
	if !ok || !idRE.MatchString(id) {
		return 0, "", false
	}
	return port, id, true
}

// parseHost is ParseHost without the check of the ID: a host shaped like
// sandbox traffic whose ID is malformed is still sandbox traffic, answered
// like an unknown sandbox.
func parseHost(host, domain string) (port int, id string, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, rest, found := strings.Cut(host, ".")
	if !found || rest == "" || (domain != "" && rest != domain) {
		return 0, "", false
	}
	parts := strings.Split(label, "-")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, "", false
	}
	port, err := strconv.Atoi(parts[0])
	if err != nil || port < 1 || port > 65535 || parts[1] == "" {
		return 0, "", false
	}
	return port, parts[1], true
}

// Match reports whether r is sandbox traffic rather than an API call.
func (p *Proxy) Match(r *http.Request) bool {
	if r.Header.Get(HeaderSandboxID) != "" || r.Header.Get(HeaderSandboxPort) != "" {
		return true
	}
	_, _, ok := parseHost(r.Host, p.cfg.Domain)
	return ok
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, port, ok := p.parse(w, r)
	if !ok {
		return
	}
	if !idRE.MatchString(id) {
		// A malformed ID is answered like an unknown one; it is never
		// looked up, so it can reach nothing that names a host object.
		writeNotFound(w, id)
		return
	}
	// Followed before the lookup: a removal after it ends this request
	// (CloseSandbox), one before it makes the lookup fail.
	r, unfollow := p.follow(w, r, id)
	defer unfollow()
	t, found := p.cfg.Resolver.Lookup(id)
	// Checked before an auto-resume: traffic without the token must not
	// even wake the sandbox.
	if found && port != p.cfg.EnvdPort && t.TrafficToken != "" &&
		subtle.ConstantTimeCompare([]byte(r.Header.Get(HeaderTrafficToken)), []byte(t.TrafficToken)) != 1 {
		errhttp.WriteError(w, errdefs.Public(errdefs.ErrPermissionDenied, "this sandbox's traffic needs a valid "+HeaderTrafficToken+" header"))
		return
	}
	if found && t.State != "running" && t.AutoResume {
		woke, err := p.cfg.Resolver.Wake(r.Context(), id)
		if err != nil {
			p.log.Warn("auto-resume failed", "sandboxID", id, "err", err)
		} else {
			t = woke
		}
	}
	if !found || t.State != "running" {
		writeNotFound(w, id)
		return
	}
	token := t.Token
	if port == p.cfg.EnvdPort {
		if envdInternal[r.URL.Path] {
			errhttp.WriteError(w, errdefs.ErrNotFound)
			return
		}
		if token != "" && r.URL.Path != "/files" && r.URL.Path != "/health" &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get(HeaderAccessToken)), []byte(token)) != 1 {
			errhttp.WriteError(w, errdefs.Public(errdefs.ErrUnauthenticated, "invalid access token"))
			return
		}
	}
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, route{id: id, port: port, addr: t.Addr, gen: t.Gen}))
	// Streaming RPCs write the response while the request body is still
	// being copied upstream; without full duplex the HTTP/1 server consumes
	// the rest of the body on the first write and cuts the upstream copy.
	_ = http.NewResponseController(w).EnableFullDuplex()
	p.rp.ServeHTTP(w, r)
}

// parse finds the sandbox and port, writing a 400 when the headers are
// bad. The ID it returns may be malformed.
func (p *Proxy) parse(w http.ResponseWriter, r *http.Request) (string, int, bool) {
	hid, hport := r.Header.Get(HeaderSandboxID), r.Header.Get(HeaderSandboxPort)
	if hid == "" && hport == "" {
		port, id, ok := parseHost(r.Host, p.cfg.Domain)
		if !ok {
			errhttp.WriteError(w, errdefs.Public(errdefs.ErrInvalidArgument, "cannot route: no sandbox in headers or host"))
		}
		return id, port, ok
	}
	if hid == "" || hport == "" {
		errhttp.WriteError(w, errdefs.Public(errdefs.ErrInvalidArgument, "both E2b-Sandbox-Id and E2b-Sandbox-Port headers are required"))
		return "", 0, false
	}
	port, err := strconv.Atoi(hport)
	if err != nil || port < 1 || port > 65535 {
		errhttp.WriteError(w, errdefs.Public(errdefs.ErrInvalidArgument, "invalid E2b-Sandbox-Port header"))
		return "", 0, false
	}
	id, _, _ := strings.Cut(hid, "-")
	return id, port, true
}

// writeNotFound is E2B's answer for a sandbox that does not run (unknown,
// gone, paused, or an ID that is not well formed): 502, which the SDKs
// read as "the sandbox timed out or was killed".
func writeNotFound(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": 502})
}

func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t := targetFrom(r)
	if errors.Is(err, syscall.ECONNREFUSED) {
		writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": t.id,
			"message": "The sandbox is running but port is not open", "port": t.port, "code": 502})
		return
	}
	if errors.Is(context.Cause(r.Context()), errSandboxRemoved) {
		writeNotFound(w, t.id)
		return
	}
	if r.Context().Err() != nil {
		// The client went away (or its connection broke): nothing reads
		// this, but an empty answer would be a 200.
		writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": t.id, "message": "The request was cancelled", "code": 502})
		return
	}
	_, live := p.cfg.Resolver.Lookup(t.id)
	attrs := []any{"sandboxID", t.id, "port", t.port, "err", err}
	if live && p.cfg.Explain != nil { // a gone sandbox's address explains nothing
		attrs = append(attrs, "network", p.cfg.Explain(t.addr))
	}
	p.log.Warn("proxy error", attrs...)
	if !live {
		writeNotFound(w, t.id)
		return
	}
	// err names the sandbox's address: it stays in the log.
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": t.id,
		"message": "Error proxying request to sandbox", "port": t.port, "code": 502})
}

func writeJSON(w http.ResponseWriter, status int, v any) { errhttp.WriteJSON(w, status, v) }

// SandboxOf returns the sandbox that r, as sandbox traffic for domain,
// addresses (from the E2B headers or the host); ok is false for an API
// call or a malformed ID (the proxy answers those itself).
func SandboxOf(r *http.Request, domain string) (id string, ok bool) {
	if hid := r.Header.Get(HeaderSandboxID); hid != "" {
		id, _, _ = strings.Cut(hid, "-")
	} else if _, hid, found := parseHost(r.Host, domain); found {
		id = hid
	}
	return id, id != "" && idRE.MatchString(id)
}
