package firewall

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

const allowedSet = "allowed"

// HostnetsChain is the regular chain, jumped to from forward for every
// packet from a sandbox, that drops traffic to the host's own networks
// (SetDeny). It is flushed and refilled in one transaction whenever they
// change.
const HostnetsChain = "hostnets"

// blockedV4 are destinations a sandbox never reaches, even with internet
// access: the host's own networks, loopback, link-local (cloud metadata at
// 169.254.169.254), CGNAT, multicast and reserved.
var blockedV4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/3"),
}

// blockedV6 is blockedV4's IPv6 counterpart: the unspecified, loopback,
// IPv4-compatible and IPv4-mapped addresses (::/96, ::ffff:0:0/96),
// prefixes that carry IPv4 addresses to a translator or tunnel on the
// host's side (NAT64 64:ff9b::/96 and 64:ff9b:1::/48, Teredo 2001::/32,
// 6to4 2002::/16: they would reach private IPv4 space), discard-only
// 100::/64, unique local (fc00::/7: the host's own ULA networks and every
// sandbox), site-local and link-local (fec0::/10, fe80::/10) and multicast.
var blockedV6 = []netip.Prefix{
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("::ffff:0:0/96"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fec0::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// tableSets are the sets of the inet table the filter chains look up.
type tableSets struct {
	allowed, addrs, addrs6, proxied *nftables.Set
	egress                          egressSets
}

// ifnameKey is an interface name as nftables compares it: IFNAMSIZ bytes, NUL padded.
func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func (f *Firewall) table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: f.c.Table}
}

// Install (re)creates the table atomically, keeping the members of the
// "allowed" set so that a restarted server does not cut running sandboxes off,
// and filling the hostnets chain with the current deny list.
func (f *Firewall) Install() (retErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.conn()
	if err != nil {
		return err
	}
	defer func() { f.done(c, retErr) }()
	keep, err := keepElements(c, f.table(), allowedSet)
	if err != nil {
		return err
	}
	keepAddrs, err := keepElements(c, f.table(), sandboxAddrsSet)
	if err != nil {
		return err
	}
	keepAddrs6, err := keepElements(c, f.table(), sandboxAddrs6Set)
	if err != nil {
		return err
	}
	keepEgress, err := f.keepEgress(c)
	if err != nil {
		return err
	}
	keepProxied, err := keepElements(c, f.table(), proxiedSet)
	if err != nil {
		return err
	}
	for _, old := range []*nftables.Table{f.table(), f.arpTable()} {
		if _, err := c.ListTableOfFamily(old.Name, old.Family); err == nil {
			c.DelTable(old)
		}
	}
	t := c.AddTable(f.table())
	sets := tableSets{allowed: &nftables.Set{Table: t, Name: allowedSet, KeyType: nftables.TypeIFName}, proxied: proxiedSetIn(t)}
	if err := c.AddSet(sets.allowed, keep); err != nil {
		return fmt.Errorf("nftables: add set: %w", err)
	}
	if err := c.AddSet(sets.proxied, keepProxied); err != nil {
		return fmt.Errorf("nftables: add set %s: %w", proxiedSet, err)
	}
	hostnets := c.AddChain(&nftables.Chain{Name: HostnetsChain, Table: t})
	addHostnetsRules(c, t, hostnets, f.deny)
	if sets.addrs, sets.addrs6, err = f.addAntispoof(c, t, keepAddrs, keepAddrs6); err != nil {
		return err
	}
	if sets.egress, err = addEgressSets(c, t, keepEgress); err != nil {
		return err
	}
	input := f.addFilterChains(c, t, sets, hostnets)
	f.addProxyRules(c, t, sets, input)
	f.st = nil // read again at the next change, whatever the outcome
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: install table inet %s: %w", f.c.Table, err)
	}
	f.denyDirty = false
	return nil
}

// keepElements reads the members of set name in table t (none if absent).
func keepElements(c *nftables.Conn, t *nftables.Table, name string) ([]nftables.SetElement, error) {
	if _, err := c.ListTableOfFamily(t.Name, t.Family); err != nil {
		return nil, nil
	}
	s, err := c.GetSetByName(t, name)
	if err != nil {
		return nil, nil
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("nftables: read set %s: %w", name, err)
	}
	var keep []nftables.SetElement
	for _, e := range elems {
		keep = append(keep, nftables.SetElement{Key: e.Key})
	}
	return keep, nil
}

// addFilterChains adds the base chains of table t to c's batch and returns
// the input chain.
func (f *Firewall) addFilterChains(c *nftables.Conn, t *nftables.Table, sets tableSets, hostnets *nftables.Chain) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	input := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	forward := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})

	iif := f.ifMatch(expr.MetaKeyIIFNAME, expr.CmpOpEq)
	oif := f.ifMatch(expr.MetaKeyOIFNAME, expr.CmpOpEq)
	add := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: join(exprs...)})
	}
	// input: a sandbox only gets answers, and its neighbour discovery
	// (antispoof let only its own through).
	add(input, iif, ctEstablished(), verdict(expr.VerdictAccept))
	for _, typ := range []byte{icmp6NeighSolicit, icmp6NeighAdvert} {
		add(input, iif, ipv6(), l4proto(unix.IPPROTO_ICMPV6), icmp6Type(expr.CmpOpEq, typ), hopLimit255(), verdict(expr.VerdictAccept))
	}
	add(input, iif, verdict(expr.VerdictDrop))
	// forward.
	add(forward, iif, oif, verdict(expr.VerdictDrop))
	add(forward, oif, ipv4(), notInSet(expr.MetaKeyOIFNAME, 16, sets.addrs), verdict(expr.VerdictDrop))
	add(forward, oif, ipv6(), inSet6(expr.MetaKeyOIFNAME, 24, sets.addrs6, true), verdict(expr.VerdictDrop))
	add(forward, oif, ctEstablished(), verdict(expr.VerdictAccept))
	add(forward, oif, verdict(expr.VerdictDrop))
	for _, p := range append(append(slices.Clone(blockedV4), blockedV6...), f.c.Subnet6) {
		add(forward, iif, daddrIn(p), verdict(expr.VerdictDrop))
	}
	add(forward, iif, []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: hostnets.Name}})
	addEgressRules(add, forward, iif, sets)
	add(forward, iif, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: sets.allowed.Name, SetID: sets.allowed.ID},
	}, verdict(expr.VerdictAccept))
	add(forward, iif, verdict(expr.VerdictDrop))
	// postrouting: masquerade what leaves the subnets for the outside.
	notSandbox := f.ifMatch(expr.MetaKeyOIFNAME, expr.CmpOpNeq)
	add(post, saddrIn(f.c.Subnet), notSandbox, []expr.Any{&expr.Masq{}})
	add(post, saddrIn(f.c.Subnet6), notSandbox, []expr.Any{&expr.Masq{}})
	return input
}

// addEgressRules adds the per-sandbox egress policy to the forward chain
// (through add): allowOut wins over denyOut; both only after the blocks
// before them, which no policy opens. IPv6 from a sandbox with domain
// rules is refused at once (ICMPv6 administratively prohibited) unless
// allowOut names its destination, and its DNS is refused even then: DNS
// and web traffic of such a sandbox go through Moat's resolver and proxy,
// which are reached over IPv4 only.
func addEgressRules(add func(*nftables.Chain, ...[]expr.Any), forward *nftables.Chain, iif []expr.Any, sets tableSets) {
	e := sets.egress
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		add(forward, iif, ipv6(), inProxied(sets.proxied), l4proto(proto), dport(53), rejectAdmin())
	}
	add(forward, iif, ipv4(), inEgress(e.allow), verdict(expr.VerdictAccept))
	add(forward, iif, ipv6(), inEgress6(e.allow6), verdict(expr.VerdictAccept))
	add(forward, iif, ipv6(), inProxied(sets.proxied), rejectAdmin())
	add(forward, iif, ipv4(), inEgress(e.deny), verdict(expr.VerdictDrop))
	add(forward, iif, ipv6(), inEgress6(e.deny6), verdict(expr.VerdictDrop))
}

// rejectAdmin answers with an ICMP(v6) administratively prohibited error.
func rejectAdmin() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: 3}} // NFT_REJECT_ICMPX_ADMIN_PROHIBITED
}

// addHostnetsRules adds one drop rule per prefix of deny to chain ch.
func addHostnetsRules(c *nftables.Conn, t *nftables.Table, ch *nftables.Chain, deny []netip.Prefix) {
	for _, p := range mergePrefixes(deny) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: join(daddrIn(p), verdict(expr.VerdictDrop))})
	}
}

func join(exprs ...[]expr.Any) []expr.Any {
	var all []expr.Any
	for _, e := range exprs {
		all = append(all, e...)
	}
	return all
}

// Delete removes the inet and arp tables; missing ones are not an error.
func (f *Firewall) Delete() (retErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = nil
	c, err := f.conn()
	if err != nil {
		return err
	}
	defer func() { f.done(c, retErr) }()
	n := 0
	for _, t := range []*nftables.Table{f.table(), f.arpTable()} {
		if _, err := c.ListTableOfFamily(t.Name, t.Family); err == nil {
			c.DelTable(t)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete tables %s: %w", f.c.Table, err)
	}
	return nil
}

// AllowedIfs lists the members of the "allowed" set.
func (f *Firewall) AllowedIfs() (_ map[string]bool, retErr error) {
	c, err := f.conn()
	if err != nil {
		return nil, err
	}
	defer func() { f.done(c, retErr) }()
	s, err := c.GetSetByName(f.table(), allowedSet)
	if err != nil {
		return nil, fmt.Errorf("nftables: set %s: %w", allowedSet, err)
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("nftables: read set %s: %w", allowedSet, err)
	}
	out := map[string]bool{}
	for _, e := range elems {
		out[unix.ByteSliceToString(e.Key)] = true
	}
	return out, nil
}

// SetAllowed adds ifname to, or removes it from, the "allowed" set. Removing
// an absent name succeeds.
func (f *Firewall) SetAllowed(ifname string, allow bool) error {
	return f.change(fmt.Sprintf("update set %s with %s", allowedSet, ifname), func(c *nftables.Conn, st *state) (func(), error) {
		var commits []func()
		err := planMember(c, st.allowed, f.allowedSet(), ifname, allow, &commits)
		return all(commits), err
	})
}

func (f *Firewall) allowedSet() *nftables.Set {
	return &nftables.Set{Table: f.table(), Name: allowedSet, KeyType: nftables.TypeIFName}
}

// ifMatch compares the interface name's prefix (a wildcard "mh*").
func (f *Firewall) ifMatch(key expr.MetaKey, op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte(f.c.IfPrefix)},
	}
}

func ctEstablished() []expr.Any { return ctEstablishedIs(expr.CmpOpNeq) }

// ctNotEstablished matches packets of no established or related
// connection: new ones, and invalid or untracked ones (no conntrack entry).
func ctNotEstablished() []expr.Any { return ctEstablishedIs(expr.CmpOpEq) }

// ctEstablishedIs compares the packet's ct state bits established|related
// with zero by op (CmpOpNeq: one of them is set).
func ctEstablishedIs(op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: op, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

func ipv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

func ipv6() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
	}
}

// daddrIn and saddrIn match the family of p (IPv4 or IPv6) and the
// destination or source address against p.
func daddrIn(p netip.Prefix) []expr.Any {
	if p.Addr().Is4() {
		return join(ipv4(), addrIn(16, p))
	}
	return join(ipv6(), addrIn(24, p))
}

func saddrIn(p netip.Prefix) []expr.Any {
	if p.Addr().Is4() {
		return join(ipv4(), addrIn(12, p))
	}
	return join(ipv6(), addrIn(8, p))
}

// addrIn matches the network header's address at offset against prefix p.
func addrIn(offset uint32, p netip.Prefix) []expr.Any {
	n := uint32(p.Addr().BitLen() / 8)
	mask := make([]byte, n)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	a := p.Masked().Addr().AsSlice()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: n},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }
