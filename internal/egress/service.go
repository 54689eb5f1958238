package egress

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"

	"github.com/moatsh/moat/internal/egress/inject"
	"github.com/moatsh/moat/internal/egress/tlsca"
)

// Service is the resolver and the proxy listening on the host, as `moat
// serve` runs them: one UDP and one TCP socket on the same port for DNS,
// one TCP socket for the proxy, all on every host address (the firewall
// redirects only sandboxes with domain rules to them and accepts nothing
// else on those ports; the resolver answers REFUSED and the proxy closes
// for sources without rules).
type Service struct {
	Table    *Table
	resolver *Resolver
	proxy    *Proxy
	inject   *inject.Server
	blocked  atomic.Pointer[func(netip.Addr) bool]

	dnsUDP   net.PacketConn
	dnsTCP   net.Listener
	proxyTCP net.Listener
}

// Injection is what header rules need (see Proxy and package inject).
type Injection struct {
	// CA mints the certificates intercepted connections are shown; the
	// sandboxes with header rules trust its certificate.
	CA      *tlsca.CA
	Secrets inject.Secrets
	// UpstreamRoots verify the servers intercepted requests go to; nil
	// means the system pool.
	UpstreamRoots *x509.CertPool
}

// Option configures Start.
type Option func(*Service, *slog.Logger)

// WithInjection enables header rules (Policy.Headers): without it, a
// connection they would intercept is refused.
func WithInjection(in Injection) Option {
	return func(s *Service, log *slog.Logger) {
		s.inject = inject.New(inject.Config{Leaf: in.CA.Leaf, Secrets: in.Secrets, Roots: in.UpstreamRoots, Log: log,
			Blocked: func(a netip.Addr) bool { return (*s.blocked.Load())(a) }})
	}
}

// Start opens the listeners on ephemeral ports and serves until Close.
// upstreams are the resolvers allowed names are forwarded to.
func Start(log *slog.Logger, upstreams []netip.AddrPort, opts ...Option) (*Service, error) {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "egress")
	s := &Service{Table: NewTable()}
	none := func(netip.Addr) bool { return true } // fail closed until UseBlocked
	s.blocked.Store(&none)
	var err error
	for try := 0; try < 20; try++ {
		if s.dnsUDP, err = net.ListenPacket("udp4", ":0"); err != nil {
			return nil, fmt.Errorf("egress: dns listener: %w", err)
		}
		port := s.dnsUDP.LocalAddr().(*net.UDPAddr).Port
		if s.dnsTCP, err = net.Listen("tcp4", fmt.Sprintf(":%d", port)); err == nil {
			break
		}
		s.dnsUDP.Close()
		s.dnsUDP = nil
	}
	if err != nil {
		return nil, fmt.Errorf("egress: dns listener: %w", err)
	}
	if s.proxyTCP, err = net.Listen("tcp4", ":0"); err != nil {
		s.dnsUDP.Close()
		s.dnsTCP.Close()
		return nil, fmt.Errorf("egress: proxy listener: %w", err)
	}
	for _, o := range opts {
		o(s, log)
	}
	s.resolver = &Resolver{Table: s.Table, Upstreams: upstreams, Log: log}
	s.proxy = &Proxy{Table: s.Table, OriginalDst: OriginalDst, Log: log, Inject: s.inject,
		Blocked: func(a netip.Addr) bool { return (*s.blocked.Load())(a) }}
	go func() {
		if err := s.resolver.ServeUDP(s.dnsUDP); err != nil {
			log.Error("dns (udp) stopped", "err", err)
		}
	}()
	go func() {
		if err := s.resolver.ServeTCP(s.dnsTCP); err != nil {
			log.Error("dns (tcp) stopped", "err", err)
		}
	}()
	go func() {
		if err := s.proxy.Serve(s.proxyTCP); err != nil {
			log.Error("proxy stopped", "err", err)
		}
	}()
	log.Info("egress proxy listening", "dnsPort", s.DNSPort(), "proxyPort", s.ProxyPort(), "upstreams", upstreams,
		"headerRules", s.inject != nil)
	return s, nil
}

// DNSPort and ProxyPort are the ports the firewall redirects to.
func (s *Service) DNSPort() uint16 { return uint16(s.dnsUDP.LocalAddr().(*net.UDPAddr).Port) }

// ProxyPort is the transparent proxy's port.
func (s *Service) ProxyPort() uint16 { return uint16(s.proxyTCP.Addr().(*net.TCPAddr).Port) }

// SetPolicy replaces the policy of the sandbox at addr (no domains:
// none); see Table.SetPolicy.
func (s *Service) SetPolicy(addr netip.Addr, p Policy) { s.Table.SetPolicy(addr, p) }

// UseBlocked sets the destinations the proxy never dials (until it is
// called, it dials none).
func (s *Service) UseBlocked(f func(netip.Addr) bool) { s.blocked.Store(&f) }

// Close stops the listeners and the intercepted connections; spliced
// connections go on until they end.
func (s *Service) Close() error {
	err := errors.Join(s.dnsUDP.Close(), s.dnsTCP.Close(), s.proxyTCP.Close())
	if s.inject != nil {
		err = errors.Join(err, s.inject.Close())
	}
	return err
}

// ParseUpstreams parses a comma-separated list of resolvers ("ip" or
// "ip:port", port 53 by default).
func ParseUpstreams(s string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if a, err := netip.ParseAddr(f); err == nil {
			out = append(out, netip.AddrPortFrom(a, 53))
			continue
		}
		ap, err := netip.ParseAddrPort(f)
		if err != nil {
			return nil, fmt.Errorf("resolver %q: not ip or ip:port", f)
		}
		out = append(out, ap)
	}
	return out, nil
}

// HostUpstreams returns the host's resolvers from /etc/resolv.conf (the
// resolver runs on the host, so loopback and LAN resolvers are usable), or
// 1.1.1.1 and 8.8.8.8 when it lists none.
func HostUpstreams() []netip.AddrPort {
	var out []netip.AddrPort
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == "nameserver" {
				if a, err := netip.ParseAddr(f[1]); err == nil && a.Zone() == "" {
					out = append(out, netip.AddrPortFrom(a.Unmap(), 53))
				}
			}
		}
	}
	if len(out) == 0 {
		out = []netip.AddrPort{netip.MustParseAddrPort("1.1.1.1:53"), netip.MustParseAddrPort("8.8.8.8:53")}
	}
	return out
}
