package netpolicy

import (
	"fmt"
	"net/netip"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/sandboxid"
)

// Net is the network of one sandbox.
type Net struct {
	ID          string
	NSPath      string     // bind-mounted network namespace, for the OCI spec's network namespace path
	HostIf      string     // host side of the veth pair
	HostAddr    netip.Addr // host side address: the sandbox's default gateway
	SandboxAddr netip.Addr // address of eth0 inside the sandbox
	Prefix      int        // prefix length of both addresses (30)
	Internet    bool       // egress to the internet is allowed

	// IPv6, when the host has it (else both are invalid): the same slot
	// mapped into the scope's ULA prefix (see mapTo6), a /126.
	HostAddr6    netip.Addr // host side: the sandbox's IPv6 default gateway
	SandboxAddr6 netip.Addr // eth0 inside the sandbox
}

// Prefix6 is the prefix length of Net's IPv6 addresses: the /30 mapped.
const Prefix6 = 126

// Option changes a Manager's naming scope. Tests use a scope of their own so
// they never touch a running server's objects.
type Option func(*options)

type options struct {
	table       string
	netnsPrefix string
	ifPrefix    string
	subnet      netip.Prefix
	subnet6     netip.Prefix   // ULA prefix (/96 or shorter) the subnet's addresses are mapped into
	deny        []netip.Prefix // operator's extra destinations closed to sandboxes
	proxy       *EgressProxy   // domain rules enforcement; nil: domain rules refused
}

func defaultOptions() options {
	return options{
		table:       "moat",
		netnsPrefix: "moat-",
		ifPrefix:    "mh",
		subnet:      netip.MustParsePrefix("10.200.0.0/16"),
		subnet6:     DefaultULA,
	}
}

// DefaultULA is Moat's IPv6 prefix: a unique local /48 whose global ID is
// "moat\x00" (6d 6f 61 74 00). A sandbox's IPv6 address is this prefix with
// the sandbox's IPv4 address as its last 32 bits (mapTo6), so each scope's
// IPv4 subnet maps to a disjoint IPv6 range and the /30s become /126s.
var DefaultULA = netip.MustParsePrefix("fd6d:6f61:7400::/48")

// WithSubnet6 changes the IPv6 prefix the sandboxes' addresses are mapped
// into (default DefaultULA): an IPv6 prefix of at most 96 bits, best a
// unique local one (fc00::/7), which sandboxes never reach as a destination.
func WithSubnet6(p netip.Prefix) Option { return func(o *options) { o.subnet6 = p.Masked() } }

// mapTo6 maps an IPv4 address into o's IPv6 prefix: the prefix's first 96
// bits, then a's 32.
func (o *options) mapTo6(a netip.Addr) netip.Addr {
	b := o.subnet6.Addr().As16()
	a4 := a.As4()
	copy(b[12:], a4[:])
	return netip.AddrFrom16(b)
}

// sandboxes6 is the IPv6 range of all the scope's sandboxes: subnet mapped.
func (o *options) sandboxes6() netip.Prefix {
	return netip.PrefixFrom(o.mapTo6(o.subnet.Addr()), 96+o.subnet.Bits())
}

func validSubnet6(p netip.Prefix) bool {
	return p.IsValid() && p.Addr().Is6() && !p.Addr().Is4In6() && p.Bits() <= 96
}

// WithScope names every object differently: nftables table, netns name prefix
// ("<table>-"), host interface prefix (two characters) and the IPv4 subnet the
// /30s are cut from.
func WithScope(table, ifPrefix string, subnet netip.Prefix) Option {
	return func(o *options) {
		o.table = table
		o.netnsPrefix = table + "-"
		o.ifPrefix = ifPrefix
		o.subnet = subnet.Masked()
	}
}

// WithTestScope is WithScope for runtime.Backends.Scope n (1–9): table
// "moats<n>", interfaces "s<n>…", subnet 10.(210+n).0.0/16 — names no
// other scope (the host's "moat", mh…, 10.200.0.0/16, or the Go tests')
// uses. n 0 is the host scope: no change.
func WithTestScope(n int) Option {
	if n <= 0 || n > 9 {
		return func(*options) {}
	}
	return WithScope(fmt.Sprintf("moats%d", n), fmt.Sprintf("s%d", n), netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(210 + n), 0, 0}), 16))
}

// WithDenyPrefixes closes more destinations to every sandbox, on top of the
// host's own networks and gateways (see package hostnet) and the fixed private
// ranges; IPv4 and IPv6 prefixes are both accepted.
func WithDenyPrefixes(ps []netip.Prefix) Option {
	return func(o *options) { o.deny = append(o.deny, ps...) }
}

// ifnameIDLen is how much of the ID goes into an interface name: IFNAMSIZ is
// 16 including the NUL, and the prefix takes 2.
const ifnameIDLen = 12

// validID reports whether id can name host objects.
func validID(id string) error { return sandboxid.Validate(id, 64) }

func (o *options) hostIf(id string) string {
	if len(id) > ifnameIDLen {
		id = id[:ifnameIDLen]
	}
	return o.ifPrefix + id
}

func (o *options) netnsName(id string) string { return o.netnsPrefix + id }

// allocator hands out /30 slots of a subnet. Not safe for concurrent use.
type allocator struct {
	subnet netip.Prefix
	byID   map[string]int
	bySlot map[int]string
	next   int
}

func newAllocator(subnet netip.Prefix) *allocator {
	return &allocator{subnet: subnet, byID: map[string]int{}, bySlot: map[int]string{}}
}

func (a *allocator) size() int {
	if a.subnet.Bits() > 30 {
		return 0
	}
	return 1 << (30 - a.subnet.Bits())
}

// alloc reserves a free slot for id, round-robin so a freed slot is not reused
// at once (stale conntrack entries and ARP caches age out first). Slots for
// which taken reports true (addresses already on the host) are skipped.
func (a *allocator) alloc(id string, taken func(slot int) bool) (int, error) {
	if _, ok := a.byID[id]; ok {
		return 0, fmt.Errorf("network for sandbox %s: %w", id, errdefs.ErrAlreadyExists)
	}
	n := a.size()
	for i := 0; i < n; i++ {
		s := (a.next + i) % n
		if _, used := a.bySlot[s]; !used && (taken == nil || !taken(s)) {
			a.claim(id, s)
			a.next = (s + 1) % n
			return s, nil
		}
	}
	return 0, fmt.Errorf("no free /30 in %s: %w", a.subnet, errdefs.ErrResourceExhausted)
}

func (a *allocator) claim(id string, slot int) {
	a.byID[id] = slot
	a.bySlot[slot] = id
}

func (a *allocator) free(id string) {
	if s, ok := a.byID[id]; ok {
		delete(a.byID, id)
		delete(a.bySlot, s)
	}
}

// addrs returns the host and sandbox addresses of slot.
func (a *allocator) addrs(slot int) (host, sandbox netip.Addr) {
	b := a.subnet.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	base += uint32(slot) * 4
	mk := func(v uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return mk(base + 1), mk(base + 2)
}

// slotOf is the inverse of addrs for either address; ok is false outside the subnet.
func (a *allocator) slotOf(addr netip.Addr) (int, bool) {
	if !addr.Is4() || !a.subnet.Contains(addr) {
		return 0, false
	}
	b, s := addr.As4(), a.subnet.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	base := uint32(s[0])<<24 | uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3])
	return int((v - base) / 4), true
}
