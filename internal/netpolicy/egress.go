package netpolicy

import (
	"errors"
	"fmt"
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
type Egress struct {
	Allow    []netip.Prefix
	Deny     []netip.Prefix
	Internet bool
	Domains  []string
}

// EgressProxy is where a host's domain-rule enforcement listens: the
// resolver on DNSPort (udp and tcp) and the transparent proxy on ProxyPort
// (tcp), on all of the host's addresses (the redirect targets the veth's
// host address). Rules is told a sandbox's address and allowOut domains
// before its traffic is redirected (nil domains: forget it). UseBlocked,
// if set, is handed the Manager's Blocked when New succeeds.
type EgressProxy struct {
	DNSPort    uint16
	ProxyPort  uint16
	Rules      func(sandbox netip.Addr, domains []string)
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
var ErrDomainUnsupported = errors.New("domain rules are not supported on this host")

// ErrDomainsRequireDenyAll is E2B's rule: allowOut domains are only
// meaningful when denyOut blocks everything else.
var ErrDomainsRequireDenyAll = errors.New("when specifying allowed domains in allowOut, you must include '0.0.0.0/0' (ALL_TRAFFIC) in denyOut to block all other traffic")

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
		return Entry{}, fmt.Errorf("empty entry: %w", errdefs.ErrInvalidArgument)
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Zone() != "" {
			return Entry{}, fmt.Errorf("%q is not a valid CIDR block: %w", s, errdefs.ErrInvalidArgument)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return Entry{Prefix: p.Masked()}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return Entry{}, fmt.Errorf("%q: IP addresses with a zone are not allowed: %w", s, errdefs.ErrInvalidArgument)
		}
		a = a.Unmap()
		return Entry{Prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	if host, port, ok := strings.Cut(s, ":"); ok && port != "" && !strings.Contains(port, ":") {
		if _, err := ParseEntry(host); err == nil {
			return Entry{}, fmt.Errorf("%q: port rules are not supported: %w", s, errdefs.ErrInvalidArgument)
		}
	}
	d := strings.ToLower(strings.TrimSuffix(s, "."))
	wild := false
	if rest, ok := strings.CutPrefix(d, "*."); ok {
		d, wild = rest, true
	}
	if !validDomain(d) {
		return Entry{}, fmt.Errorf("%q is not an IP address, CIDR block or domain name: %w", s, errdefs.ErrInvalidArgument)
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
			return nil, nil, nil, nil, fmt.Errorf("network.%s: at most %d entries: %w", l.name, MaxEgressEntries, errdefs.ErrInvalidArgument)
		}
		for _, s := range l.in {
			e, perr := ParseEntry(s)
			switch {
			case perr != nil:
				return nil, nil, nil, nil, fmt.Errorf("network.%s: invalid entry: %w", l.name, perr)
			case e.IsDomain() && !l.domains:
				return nil, nil, nil, nil, fmt.Errorf("network.%s: invalid entry %q: domain names are not supported for deny rules, only IP addresses and CIDR blocks: %w",
					l.name, s, errdefs.ErrInvalidArgument)
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
			return nil, nil, nil, nil, fmt.Errorf("network.allowOut: at most %d domain names: %w", MaxEgressDomains, errdefs.ErrInvalidArgument)
		}
		if !slices.Contains(canonDeny, "0.0.0.0/0") {
			return nil, nil, nil, nil, fmt.Errorf("network.allowOut: %w: %w", ErrDomainsRequireDenyAll, errdefs.ErrInvalidArgument)
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

// ipv4Range is an inclusive range of IPv4 addresses.
type ipv4Range struct{ from, to uint32 }

func v4(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func v4Addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// mergeV4 turns the IPv4 prefixes of ps into sorted, disjoint, non-adjacent
// ranges: the elements of an interval set may not overlap. IPv6 prefixes
// are dropped.
func mergeV4(ps []netip.Prefix) []ipv4Range {
	var rs []ipv4Range
	for _, p := range ps {
		if !p.Addr().Is4() {
			continue
		}
		p = p.Masked()
		from := v4(p.Addr())
		to := from | uint32((uint64(1)<<(32-p.Bits()))-1)
		rs = append(rs, ipv4Range{from, to})
	}
	slices.SortFunc(rs, func(a, b ipv4Range) int {
		switch {
		case a.from < b.from:
			return -1
		case a.from > b.from:
			return 1
		}
		return 0
	})
	var out []ipv4Range
	for _, r := range rs {
		if n := len(out); n > 0 && (r.from <= out[n-1].to || out[n-1].to != ^uint32(0) && r.from == out[n-1].to+1) {
			out[n-1].to = max(out[n-1].to, r.to)
			continue
		}
		out = append(out, r)
	}
	return out
}

// addrRange is an inclusive range of addresses of one family.
type addrRange struct{ from, to netip.Addr }

func v4Ranges(rs []ipv4Range) []addrRange {
	out := make([]addrRange, 0, len(rs))
	for _, r := range rs {
		out = append(out, addrRange{v4Addr(r.from), v4Addr(r.to)})
	}
	return out
}

// mergeV6 turns the IPv6 prefixes of ps into sorted, disjoint,
// non-adjacent ranges, as mergeV4 does for IPv4. IPv4 prefixes are
// dropped.
func mergeV6(ps []netip.Prefix) []addrRange {
	var rs []addrRange
	for _, p := range ps {
		if !p.Addr().Is6() || p.Addr().Is4In6() {
			continue
		}
		p = p.Masked()
		last := p.Addr().As16()
		for i := p.Bits(); i < 128; i++ {
			last[i/8] |= 0x80 >> (i % 8)
		}
		rs = append(rs, addrRange{p.Addr(), netip.AddrFrom16(last)})
	}
	slices.SortFunc(rs, func(a, b addrRange) int { return a.from.Compare(b.from) })
	var out []addrRange
	for _, r := range rs {
		if n := len(out); n > 0 && (r.from.Compare(out[n-1].to) <= 0 || out[n-1].to.Next() == r.from) {
			if r.to.Compare(out[n-1].to) > 0 {
				out[n-1].to = r.to
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// denyAllV6 is what a denyOut holding 0.0.0.0/0 also denies: E2B's
// "deny all traffic" covers IPv6 too.
var denyAllV6 = netip.MustParsePrefix("::/0")

// withDenyAllV6 returns deny, plus ::/0 when it holds 0.0.0.0/0.
func withDenyAllV6(deny []netip.Prefix) []netip.Prefix {
	for _, p := range deny {
		if p.Addr().Is4() && p.Bits() == 0 {
			return append(slices.Clone(deny), denyAllV6)
		}
	}
	return deny
}
