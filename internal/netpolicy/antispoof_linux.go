package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// Anti-spoofing: a sandbox (a microVM guest's root, a container's root in its
// netns) can write any packet onto its veth. The set sandboxAddrsSet maps
// each host-side ifname to the one IPv4 address its sandbox owns; it exists
// in the inet table and, with the same members, in the arp table of the same
// name, and both are updated in one transaction.
const (
	sandboxAddrsSet = "sandbox_addrs"
	antispoofChain  = "antispoof"
	counterSpoofed4 = "spoofed_ipv4" // IPv4 from a sandbox with another source
	counterSpoofed6 = "spoofed_ipv6" // IPv6 from a sandbox (never allowed)
	counterSpoofARP = "spoofed_arp"  // ARP from a sandbox for another address
)

// arpIn is NF_ARP_IN, the hook of ARP packets received (input).
const arpIn nftables.ChainHook = 0

var sandboxAddrType = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)

func (m *Manager) arpTable() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyARP, Name: m.o.table}
}

func sandboxAddrsIn(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: sandboxAddrsSet, KeyType: sandboxAddrType, Concatenation: true}
}

// sandboxAddrKey is the set key ifname . ipv4_addr.
func sandboxAddrKey(ifname string, a netip.Addr) []byte {
	a4 := a.As4()
	return append(ifnameKey(ifname), a4[:]...)
}

// addAntispoof adds to c's batch the inet table's prerouting chain at raw
// priority (before conntrack and routing) and the ARP table's input chain,
// each with its set (holding keep) and named counters, and the forward rule
// that delivers nothing but the sandbox's own address toward its veth.
func (m *Manager) addAntispoof(c *nftables.Conn, inet *nftables.Table, keep []nftables.SetElement) (*nftables.Set, error) {
	set := sandboxAddrsIn(inet)
	if err := c.AddSet(set, keep); err != nil {
		return nil, fmt.Errorf("nftables: add set %s: %w", sandboxAddrsSet, err)
	}
	for _, name := range []string{counterSpoofed4, counterSpoofed6} {
		c.AddObj(&nftables.CounterObj{Table: inet, Name: name})
	}
	accept := nftables.ChainPolicyAccept
	pre := c.AddChain(&nftables.Chain{Name: antispoofChain, Table: inet, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &accept})
	iif := m.ifMatch(expr.MetaKeyIIFNAME, expr.CmpOpEq)
	add := func(t *nftables.Table, ch *nftables.Chain, exprs ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: join(exprs...)})
	}
	add(inet, pre, iif, ipv4(), notInSet(expr.MetaKeyIIFNAME, 12, set), countDrop(counterSpoofed4))
	add(inet, pre, iif, ipv6(), countDrop(counterSpoofed6))

	arp := c.AddTable(m.arpTable())
	arpSet := sandboxAddrsIn(arp)
	if err := c.AddSet(arpSet, keep); err != nil {
		return nil, fmt.Errorf("nftables: add arp set %s: %w", sandboxAddrsSet, err)
	}
	c.AddObj(&nftables.CounterObj{Table: arp, Name: counterSpoofARP})
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
		}, countDrop(counterSpoofARP))
	}
	add(arp, in, iif, notInSet(expr.MetaKeyIIFNAME, 14, arpSet), countDrop(counterSpoofARP))
	return set, nil
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

// readSandboxAddrs returns the members of the inet table's sandbox_addrs set
// as ifname → addresses; a missing table or set yields none.
func (m *Manager) readSandboxAddrs(c *nftables.Conn) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	s, err := c.GetSetByName(m.table(), sandboxAddrsSet)
	if err != nil {
		return out, nil
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("nftables: read set %s: %w", sandboxAddrsSet, err)
	}
	for _, e := range elems {
		if len(e.Key) != len(ifnameKey(""))+4 {
			continue
		}
		a, _ := netip.AddrFromSlice(e.Key[len(e.Key)-4:])
		name := string(trimNUL(e.Key[:len(e.Key)-4]))
		out[name] = append(out[name], a)
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

// bindAddr lets packets with source a (and ARP for a) in from ifname and
// delivers packets for a out to it: one transaction over both tables.
func (m *Manager) bindAddr(ifname string, a netip.Addr) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	elems := []nftables.SetElement{{Key: sandboxAddrKey(ifname, a)}}
	err = errors.Join(c.SetAddElements(sandboxAddrsIn(m.table()), elems), c.SetAddElements(sandboxAddrsIn(m.arpTable()), elems))
	if err == nil {
		err = c.Flush()
	}
	if err != nil {
		return fmt.Errorf("nftables: bind %s to %s: %w", a, ifname, err)
	}
	return nil
}

// unbindAddrs removes every binding of ifname; none is fine.
func (m *Manager) unbindAddrs(ifname string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	have, err := m.readSandboxAddrs(c)
	if err != nil {
		return err
	}
	if len(have[ifname]) == 0 {
		return nil
	}
	var elems []nftables.SetElement
	for _, a := range have[ifname] {
		elems = append(elems, nftables.SetElement{Key: sandboxAddrKey(ifname, a)})
	}
	err = errors.Join(c.SetDeleteElements(sandboxAddrsIn(m.table()), elems), c.SetDeleteElements(sandboxAddrsIn(m.arpTable()), elems))
	if err == nil {
		err = c.Flush()
	}
	if err != nil {
		return fmt.Errorf("nftables: unbind %v from %s: %w", have[ifname], ifname, err)
	}
	return nil
}
