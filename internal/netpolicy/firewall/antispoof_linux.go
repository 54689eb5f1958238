package firewall

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Anti-spoofing: a sandbox (a microVM guest's root, a container's root in its
// netns) can write any packet onto its veth. The set sandboxAddrsSet maps
// each host-side ifname to the one IPv4 address its sandbox owns; it exists
// in the inet table and, with the same members, in the arp table of the same
// name; sandboxAddrs6Set (inet table only) maps it to its IPv6 address. All
// are updated in one transaction.
const (
	sandboxAddrsSet  = "sandbox_addrs"
	sandboxAddrs6Set = "sandbox_addrs6"
	antispoofChain   = "antispoof"
)

// Named counters of the packets the anti-spoofing rules drop: nft list
// counters table inet <table> (IPv4, IPv6); nft list counters table arp
// <table> (ARP).
const (
	CounterSpoofed4 = "spoofed_ipv4" // IPv4 from a sandbox with another source
	CounterSpoofed6 = "spoofed_ipv6" // IPv6 from a sandbox with another source, or a forged NDP claim
	CounterSpoofARP = "spoofed_arp"  // ARP from a sandbox for another address
)

// ICMPv6 types the anti-spoofing rules look at.
const (
	icmp6NeighSolicit = 135
	icmp6NeighAdvert  = 136
	icmp6MLDv2Report  = 143
)

// arpIn is NF_ARP_IN, the hook of ARP packets received (input).
const arpIn nftables.ChainHook = 0

var (
	sandboxAddrType  = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)
	sandboxAddr6Type = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIP6Addr)
)

func (f *Firewall) arpTable() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyARP, Name: f.c.Table}
}

func sandboxAddrsIn(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: sandboxAddrsSet, KeyType: sandboxAddrType, Concatenation: true}
}

func sandboxAddrs6In(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: sandboxAddrs6Set, KeyType: sandboxAddr6Type, Concatenation: true}
}

// sandboxAddrKey is the set key ifname . ipv4_addr, or ifname . ipv6_addr
// for an IPv6 address.
func sandboxAddrKey(ifname string, a netip.Addr) []byte {
	return append(ifnameKey(ifname), a.AsSlice()...)
}

// addAntispoof adds to c's batch the inet table's prerouting chain at raw
// priority (before conntrack and routing) and the ARP table's input chain,
// each with its set (holding keep) and named counters, and the forward rule
// that delivers nothing but the sandbox's own address toward its veth.
func (f *Firewall) addAntispoof(c *nftables.Conn, inet *nftables.Table, keep, keep6 []nftables.SetElement) (set, set6 *nftables.Set, err error) {
	set, set6 = sandboxAddrsIn(inet), sandboxAddrs6In(inet)
	if err := c.AddSet(set, keep); err != nil {
		return nil, nil, fmt.Errorf("nftables: add set %s: %w", sandboxAddrsSet, err)
	}
	if err := c.AddSet(set6, keep6); err != nil {
		return nil, nil, fmt.Errorf("nftables: add set %s: %w", sandboxAddrs6Set, err)
	}
	for _, name := range []string{CounterSpoofed4, CounterSpoofed6} {
		c.AddObj(&nftables.CounterObj{Table: inet, Name: name})
	}
	accept := nftables.ChainPolicyAccept
	pre := c.AddChain(&nftables.Chain{Name: antispoofChain, Table: inet, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &accept})
	iif := f.ifMatch(expr.MetaKeyIIFNAME, expr.CmpOpEq)
	add := func(t *nftables.Table, ch *nftables.Chain, exprs ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: join(exprs...)})
	}
	add(inet, pre, iif, ipv4(), notInSet(expr.MetaKeyIIFNAME, 12, set), countDrop(CounterSpoofed4))
	for _, r := range antispoof6Rules(set6) {
		add(inet, pre, iif, ipv6(), r)
	}

	arp := c.AddTable(f.arpTable())
	arpSet := sandboxAddrsIn(arp)
	if err := c.AddSet(arpSet, keep); err != nil {
		return nil, nil, fmt.Errorf("nftables: add arp set %s: %w", sandboxAddrsSet, err)
	}
	c.AddObj(&nftables.CounterObj{Table: arp, Name: CounterSpoofARP})
	// The ARP family's hooks are numbered apart: NF_ARP_IN is 0.
	in := c.AddChain(&nftables.Chain{Name: "input", Table: arp, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookRef(arpIn), Priority: nftables.ChainPriorityFilter, Policy: &accept})
	// Only Ethernet/IPv4 ARP (ptype 0x0800, hlen 6, plen 4), whose sender
	// protocol address (offset 14) is the sandbox's own.
	for _, f := range []struct {
		off  uint32
		want []byte
	}{{2, []byte{0x08, 0x00}}, {4, []byte{6}}, {5, []byte{4}}} {
		add(arp, in, iif, []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: f.off, Len: uint32(len(f.want))},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: f.want},
		}, countDrop(CounterSpoofARP))
	}
	add(arp, in, iif, notInSet(expr.MetaKeyIIFNAME, 14, arpSet), countDrop(CounterSpoofARP))
	return set, set6, nil
}

// antispoof6Rules are the antispoof chain's rules for IPv6 from a sandbox's
// veth, in order: its own address (set6) as the source passes, except a
// neighbour advertisement for any other target; a neighbour solicitation
// from a link-local address (hop limit 255: from the link itself) passes;
// MLD reports (the sandbox's kernel announcing its multicast groups) are
// dropped without counting; everything else is counted and dropped. A
// sandbox so cannot send IPv6 from another address nor claim another
// address in the host's neighbour table.
func antispoof6Rules(set6 *nftables.Set) [][]expr.Any {
	ownSrc := inSet6(expr.MetaKeyIIFNAME, 8, set6, false)
	icmp6 := l4proto(unix.IPPROTO_ICMPV6)
	linkLocal := addrIn(8, netip.MustParsePrefix("fe80::/10"))
	return [][]expr.Any{
		join(ownSrc, notL4proto(unix.IPPROTO_ICMPV6), verdict(expr.VerdictAccept)),
		join(ownSrc, icmp6, icmp6Type(expr.CmpOpNeq, icmp6NeighAdvert), verdict(expr.VerdictAccept)),
		join(ownSrc, icmp6, icmp6Type(expr.CmpOpEq, icmp6NeighAdvert), ndTargetInSet6(set6), verdict(expr.VerdictAccept)),
		join(linkLocal, icmp6, icmp6Type(expr.CmpOpEq, icmp6NeighSolicit), hopLimit255(), verdict(expr.VerdictAccept)),
		join(addrIn(24, netip.MustParsePrefix("ff02::/16")), icmp6, icmp6Type(expr.CmpOpEq, icmp6MLDv2Report), verdict(expr.VerdictDrop)),
		countDrop(CounterSpoofed6),
	}
}

// inSet6 matches when (interface name . IPv6 address at offset) is (or,
// with invert, is not) in set.
func inSet6(key expr.MetaKey, offset uint32, set *nftables.Set, invert bool) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Payload{DestRegister: 2, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 16},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, Invert: invert},
	}
}

// ndTargetInSet6 matches a neighbour solicitation or advertisement whose
// target address (ICMPv6 offset 8) is, with the input interface, in set.
func ndTargetInSet6(set *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Payload{DestRegister: 2, Base: expr.PayloadBaseTransportHeader, Offset: 8, Len: 16},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
	}
}

func icmp6Type(op expr.CmpOp, typ byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte{typ}},
	}
}

func notL4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{p}},
	}
}

// hopLimit255 matches IPv6 packets with hop limit 255: sent on this link.
func hopLimit255() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 7, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{255}},
	}
}

// notInSet matches when (interface name . IPv4 address at offset) is not in set.
func notInSet(key expr.MetaKey, offset uint32, set *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Payload{DestRegister: 2, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, Invert: true},
	}
}

func countDrop(counter string) []expr.Any {
	return []expr.Any{&expr.Objref{Type: int(nftables.ObjTypeCounter), Name: counter}, &expr.Verdict{Kind: expr.VerdictDrop}}
}

// readSandboxAddrs returns the members of the inet table's sandbox_addrs
// and sandbox_addrs6 sets as ifname → addresses; a missing table or set
// yields none.
func (f *Firewall) readSandboxAddrs(c *nftables.Conn) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	for _, l := range []struct {
		name string
		n    int
	}{{sandboxAddrsSet, 4}, {sandboxAddrs6Set, 16}} {
		s, err := c.GetSetByName(f.table(), l.name)
		if err != nil {
			continue
		}
		elems, err := c.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("nftables: read set %s: %w", l.name, err)
		}
		for _, e := range elems {
			if len(e.Key) != len(ifnameKey(""))+l.n {
				continue
			}
			a, _ := netip.AddrFromSlice(e.Key[len(e.Key)-l.n:])
			name := string(trimNUL(e.Key[:len(e.Key)-l.n]))
			out[name] = append(out[name], a)
		}
	}
	return out, nil
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// Bind lets packets with source a (and ARP for a), and with source a6
// when valid, in from ifname and delivers packets for them out to it: one
// transaction over both tables.
func (f *Firewall) Bind(ifname string, a, a6 netip.Addr) error {
	return f.change(fmt.Sprintf("bind %s to %s", a, ifname), func(c *nftables.Conn, st *state) (func(), error) {
		elems := []nftables.SetElement{{Key: sandboxAddrKey(ifname, a)}}
		err := errors.Join(c.SetAddElements(sandboxAddrsIn(f.table()), elems), c.SetAddElements(sandboxAddrsIn(f.arpTable()), elems))
		if a6.IsValid() {
			err = errors.Join(err, c.SetAddElements(sandboxAddrs6In(f.table()), []nftables.SetElement{{Key: sandboxAddrKey(ifname, a6)}}))
		}
		return func() {
			st.addrs[ifname] = withAddr(st.addrs[ifname], a)
			if a6.IsValid() {
				st.addrs[ifname] = withAddr(st.addrs[ifname], a6)
			}
		}, err
	})
}

// Unbind removes every binding of ifname; none is fine.
func (f *Firewall) Unbind(ifname string) error {
	return f.change("unbind "+ifname, func(c *nftables.Conn, st *state) (func(), error) {
		have := st.addrs[ifname]
		if len(have) == 0 {
			return nil, nil
		}
		var elems, elems6 []nftables.SetElement
		for _, a := range have {
			if a.Is4() {
				elems = append(elems, nftables.SetElement{Key: sandboxAddrKey(ifname, a)})
			} else {
				elems6 = append(elems6, nftables.SetElement{Key: sandboxAddrKey(ifname, a)})
			}
		}
		var err error
		if len(elems) > 0 {
			err = errors.Join(c.SetDeleteElements(sandboxAddrsIn(f.table()), elems), c.SetDeleteElements(sandboxAddrsIn(f.arpTable()), elems))
		}
		if len(elems6) > 0 {
			err = errors.Join(err, c.SetDeleteElements(sandboxAddrs6In(f.table()), elems6))
		}
		return func() { delete(st.addrs, ifname) }, err
	})
}
