package app

import (
	"log/slog"
	"os"

	"github.com/moatsh/moat/internal/egress"
	"github.com/moatsh/moat/internal/netpolicy"
)

// EnvDNSUpstream overrides the resolvers the egress resolver forwards
// allowed names to: a comma-separated list of ip or ip:port (tests point
// it at a simulated internet). Default: the host's /etc/resolv.conf.
const EnvDNSUpstream = "MOAT_DNS_UPSTREAM"

// startEgress starts the resolver and transparent proxy that enforce
// allowOut domain rules and hands their ports to the sandbox networks
// the runtime creates. If it cannot start, domain rules are refused
// (400) and everything else works.
func startEgress(log *slog.Logger) func() {
	ups := egress.HostUpstreams()
	if v := os.Getenv(EnvDNSUpstream); v != "" {
		parsed, err := egress.ParseUpstreams(v)
		if err != nil || len(parsed) == 0 {
			log.Error("ignoring "+EnvDNSUpstream+"; domain rules disabled", "value", v, "err", err)
			netpolicy.SetHostDefaults()
			return func() {}
		}
		ups = parsed
	}
	svc, err := egress.Start(log, ups)
	if err != nil {
		log.Warn("egress proxy unavailable; network.allowOut domains will be refused", "err", err)
		netpolicy.SetHostDefaults()
		return func() {}
	}
	netpolicy.SetHostDefaults(netpolicy.WithEgressProxy(netpolicy.EgressProxy{
		DNSPort: svc.DNSPort(), ProxyPort: svc.ProxyPort(), Rules: svc.SetRules, UseBlocked: svc.UseBlocked}))
	return func() {
		netpolicy.SetHostDefaults()
		svc.Close()
	}
}
