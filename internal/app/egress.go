package app

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/moatsh/moat/internal/egress"
	"github.com/moatsh/moat/internal/egress/inject"
	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/netpolicy"
)

// EgressCADir is where the egress proxy's CA lives under the data dir.
const EgressCADir = "egress-ca"

// startEgress starts the resolver and transparent proxy that enforce
// allowOut domain rules and network.rules, and hands their ports to the
// sandbox networks the runtime creates. If it cannot start, domain rules
// are refused (400) and everything else works; if only the egress CA
// cannot be loaded, header rules are refused (see envdcall). It returns
// the CA's certificate (nil without one), which sandboxes with header
// rules are given to trust. An unreadable upstream roots file
// (Config.EgressUpstreamCA) is an error: the operator asked for it.
func startEgress(log *slog.Logger, cfg Config, sec inject.Secrets) (stop func(), caPEM []byte, err error) {
	roots, err := upstreamRoots(cfg.EgressUpstreamCA)
	if err != nil {
		return nil, nil, err
	}
	ups := egress.HostUpstreams()
	if cfg.DNSUpstream != "" {
		parsed, err := egress.ParseUpstreams(cfg.DNSUpstream)
		if err != nil || len(parsed) == 0 {
			log.Error("ignoring the DNS upstream setting (--dns-upstream, MOAT_DNS_UPSTREAM); domain rules disabled",
				"value", cfg.DNSUpstream, "err", err)
			netpolicy.SetHostDefaults()
			return func() {}, nil, nil
		}
		ups = parsed
	}
	var opts []egress.Option
	ca, err := tlsca.LoadOrCreate(filepath.Join(cfg.DataDir, EgressCADir))
	if err != nil {
		log.Error("egress CA unavailable; network.rules (header injection) will be refused", "err", err)
	} else {
		opts = append(opts, egress.WithInjection(egress.Injection{CA: ca, Secrets: sec, UpstreamRoots: roots}))
		caPEM = ca.CertPEM()
	}
	svc, err := egress.Start(log, ups, opts...)
	if err != nil {
		log.Warn("egress proxy unavailable; network.allowOut domains will be refused", "err", err)
		netpolicy.SetHostDefaults()
		return func() {}, nil, nil
	}
	netpolicy.SetHostDefaults(netpolicy.WithEgressProxy(netpolicy.EgressProxy{
		DNSPort: svc.DNSPort(), ProxyPort: svc.ProxyPort(), UseBlocked: svc.UseBlocked,
		Rules: func(a netip.Addr, r netpolicy.ProxyRules) { svc.SetPolicy(a, proxyPolicy(r)) }}))
	return func() {
		netpolicy.SetHostDefaults()
		svc.Close()
	}, caPEM, nil
}

// proxyPolicy is netpolicy's view of a sandbox's rules in egress's terms.
func proxyPolicy(r netpolicy.ProxyRules) egress.Policy {
	p := egress.Policy{Domains: r.Domains, Team: r.Team}
	for _, h := range r.Headers {
		p.Headers = append(p.Headers, inject.Rule{Domain: h.Domain, Headers: h.Headers})
	}
	return p
}

// upstreamRoots is the system pool plus the certificates in file (PEM),
// or nil (the system pool) when file is "".
func upstreamRoots(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("egress upstream CA (--egress-upstream-ca): %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("egress upstream CA (--egress-upstream-ca): no PEM certificate in %s", file)
	}
	return pool, nil
}
