package netpolicy

import (
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/moatsh/moat/internal/errdefs"
)

// Egress is one sandbox's outbound policy on top of the fixed blocks (see
// the package comment), in E2B's terms (SandboxNetworkConfig): Allow is
// allowOut, Deny is denyOut, Internet is allow_internet_access. The forward
// chain checks, in order: the always-blocked destinations (never opened by
// Allow), Allow (accept), Deny (drop), then Internet (accept, else drop).
// So Allow wins over Deny, Deny 0.0.0.0/0 is "deny all but Allow", and
// Internet false behaves like Deny 0.0.0.0/0, as E2B documents it.
//
// IPv6: a Deny holding 0.0.0.0/0 (E2B's ALL_TRAFFIC) denies every IPv6
// destination too, so "deny all" means both families and Internet false
// closes IPv6 as well; IPv6 prefixes in Allow open exactly those
// destinations, in Deny close them; IPv4 prefixes never affect IPv6.
//
// Domains are allowOut's domain entries in canonical form ("x.example",
// "*.example"); ParseEgress accepts them only with Deny 0.0.0.0/0, as E2B
// does. A sandbox with Domains has its DNS and its TCP 80/443 to addresses
// outside Allow redirected to the host's resolver and proxy (see
// EgressProxy and package egress), which let through only the allowed names.
// The redirect and the proxy are IPv4 only: such a sandbox's IPv6 traffic
// is refused at once (ICMPv6 administratively prohibited, so clients fall
// back to IPv4 although the resolver passes AAAA answers on), except to
// IPv6 prefixes in Allow, and its IPv6 DNS is refused even there.
//
// Headers are network.rules (E2B's header transforms), enforced by the
// proxy for the allowed names they match; Team owns the secrets their
// placeholders name. They grant no egress and need Domains.
type Egress struct {
	Allow    []netip.Prefix
	Deny     []netip.Prefix
	Internet bool
	Domains  []string
	Team     string
	Headers  []HeaderRule
}

// HeaderRule is one network.rules entry: headers the proxy sets on HTTPS
// requests to Domain ("x.example", or "*.example" for the names below it).
type HeaderRule struct {
	Domain  string
	Headers map[string]string
}

// ProxyRules is what the proxy enforces for one sandbox (see Egress).
type ProxyRules struct {
	Domains []string
	Team    string
	Headers []HeaderRule
}

// EgressProxy is where a host's domain-rule enforcement listens: the
// resolver on DNSPort (udp and tcp) and the transparent proxy on ProxyPort
// (tcp), on all of the host's addresses (the redirect targets the veth's
// host address). Rules is told a sandbox's address and rules before its
// traffic is redirected (no domains: forget it). UseBlocked, if set, is
// handed the Manager's Blocked when New succeeds.
type EgressProxy struct {
	DNSPort    uint16
	ProxyPort  uint16
	Rules      func(sandbox netip.Addr, r ProxyRules)
	UseBlocked func(blocked func(netip.Addr) bool)
}

// WithEgressProxy enables domain rules: without it SetEgress refuses an
// Egress with Domains.
func WithEgressProxy(p EgressProxy) Option {
	return func(o *options) { o.proxy = &p }
}

var (
	hostDefaultsMu sync.Mutex
	hostDefaults   []Option
)

// SetHostDefaults sets options every later New applies before its own:
// `moat serve` uses it to hand WithEgressProxy to the Manager a runtime
// creates.
func SetHostDefaults(opts ...Option) {
	hostDefaultsMu.Lock()
	defer hostDefaultsMu.Unlock()
	hostDefaults = slices.Clone(opts)
}

func withHostDefaults(opts []Option) []Option {
	hostDefaultsMu.Lock()
	defer hostDefaultsMu.Unlock()
	return append(slices.Clone(hostDefaults), opts...)
}

// MaxEgressEntries bounds allowOut and denyOut each.
const MaxEgressEntries = 1000

// ErrDomainUnsupported marks domain rules a host cannot enforce (a Manager
// without WithEgressProxy). Errors carrying it are also
// errdefs.ErrInvalidArgument.
var ErrDomainUnsupported = errdefs.Public(errdefs.ErrInvalidArgument, "domain rules are not supported on this host")

// ErrDomainsRequireDenyAll is E2B's rule: allowOut domains are only
// meaningful when denyOut blocks everything else.
var ErrDomainsRequireDenyAll = errdefs.Public(errdefs.ErrInvalidArgument, "when specifying allowed domains in allowOut, you must include '0.0.0.0/0' (ALL_TRAFFIC) in denyOut to block all other traffic")

// MaxEgressDomains bounds the domain entries of allowOut.
const MaxEgressDomains = 100

// Entry is one parsed allowOut/denyOut string: a prefix, or a domain name
// (Wildcard: it was "*.<Domain>" and matches subdomains at any depth, not
// the apex).
type Entry struct {
	Prefix   netip.Prefix
	Domain   string
	Wildcard bool
}

// IsDomain reports whether e names a domain rather than addresses.
func (e Entry) IsDomain() bool { return e.Domain != "" }

// String is the canonical form: a masked CIDR block (IPs as /32 or /128),
// or the lowercase domain with its "*." if wildcard.
func (e Entry) String() string {
	switch {
	case e.Wildcard:
		return "*." + e.Domain
	case e.Domain != "":
		return e.Domain
	default:
		return e.Prefix.String()
	}
}

// ParseEntry parses an allowOut/denyOut entry as E2B accepts them: a CIDR
// block ("8.8.8.0/24"; host bits are cleared as net.ParseCIDR does), a bare
// IP ("8.8.8.8"), or a domain name ("example.com", "*.example.com"). Errors
// wrap errdefs.ErrInvalidArgument.
func ParseEntry(s string) (Entry, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Entry{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "empty entry")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Zone() != "" {
			return Entry{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "%q is not a valid CIDR block", s)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return Entry{Prefix: p.Masked()}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return Entry{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "%q: IP addresses with a zone are not allowed", s)
		}
		a = a.Unmap()
		return Entry{Prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	if host, port, ok := strings.Cut(s, ":"); ok && port != "" && !strings.Contains(port, ":") {
		if _, err := ParseEntry(host); err == nil {
			return Entry{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "%q: port rules are not supported", s)
		}
	}
	d := strings.ToLower(strings.TrimSuffix(s, "."))
	wild := false
	if rest, ok := strings.CutPrefix(d, "*."); ok {
		d, wild = rest, true
	}
	if !validDomain(d) {
		return Entry{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "%q is not an IP address, CIDR block or domain name", s)
	}
	return Entry{Domain: d, Wildcard: wild}, nil
}

// validDomain checks RFC 1123 host name syntax: dot-separated labels of
// 1-63 letters, digits and inner hyphens, 253 characters at most, and not
// all digits in the last label (that would be a malformed IPv4 address).
func validDomain(d string) bool {
	if d == "" || len(d) > 253 {
		return false
	}
	labels := strings.Split(d, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return strings.IndexFunc(last, func(c rune) bool { return c < '0' || c > '9' }) >= 0
}

// ParseEgress validates E2B's allowOut and denyOut lists and returns their
// prefixes and their canonical strings (for storing and echoing back;
// canonAllow includes the domain entries, see Domains). Domains in denyOut
// are refused as in E2B; domains in allowOut require 0.0.0.0/0 in denyOut
// (ErrDomainsRequireDenyAll). Every error names the list and the entry.
func ParseEgress(allowOut, denyOut []string) (allow, deny []netip.Prefix, canonAllow, canonDeny []string, err error) {
	for _, l := range []struct {
		name    string
		in      []string
		out     *[]netip.Prefix
		canon   *[]string
		domains bool
	}{{"allowOut", allowOut, &allow, &canonAllow, true}, {"denyOut", denyOut, &deny, &canonDeny, false}} {
		if len(l.in) > MaxEgressEntries {
			return nil, nil, nil, nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "network.%s: at most %d entries", l.name, MaxEgressEntries)
		}
		for _, s := range l.in {
			e, perr := ParseEntry(s)
			switch {
			case perr != nil:
				return nil, nil, nil, nil, errdefs.PublicWrap(perr, "network.%s: invalid entry", l.name)
			case e.IsDomain() && !l.domains:
				return nil, nil, nil, nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "network.%s: invalid entry %q: domain names are not supported for deny rules, only IP addresses and CIDR blocks", l.name, s)
			}
			if c := e.String(); !slices.Contains(*l.canon, c) {
				if !e.IsDomain() {
					*l.out = append(*l.out, e.Prefix)
				}
				*l.canon = append(*l.canon, c)
			}
		}
	}
	if ds := Domains(canonAllow); len(ds) > 0 {
		if len(ds) > MaxEgressDomains {
			return nil, nil, nil, nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "network.allowOut: at most %d domain names", MaxEgressDomains)
		}
		if !slices.Contains(canonDeny, "0.0.0.0/0") {
			return nil, nil, nil, nil, errdefs.PublicWrap(ErrDomainsRequireDenyAll, "network.allowOut")
		}
	}
	return allow, deny, canonAllow, canonDeny, nil
}

// Domains returns the domain entries of canonical allowOut strings.
func Domains(canonAllow []string) []string {
	var ds []string
	for _, s := range canonAllow {
		if e, err := ParseEntry(s); err == nil && e.IsDomain() {
			ds = append(ds, e.String())
		}
	}
	return ds
}
