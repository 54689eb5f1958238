package firewall

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Sandboxes with domain rules (allowOut domains) are members of the set
// "proxied". For them chain "dnat" (prerouting, dstnat priority) redirects
// DNS (udp and tcp 53, to any address) to the host's resolver port and new
// TCP connections to ports 80 and 443 whose (ifname . destination) is not
// in "egress_allow" to the host's proxy port (see Config.Redirect); the
// input chain accepts exactly those ports from members. Redirected packets
// never reach the forward chain: the proxy and resolver decide, and the
// proxy refuses the addresses Blocked names.
const proxiedSet = "proxied"

func proxiedSetIn(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: proxiedSet, KeyType: nftables.TypeIFName}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
	}
}

func inProxied(s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

// addProxyRules adds, when f has a Redirect, chain "dnat" and the
// input rules that let redirected traffic in, to c's batch. input must run
// before the input chain's drop: the rules are inserted at the chain's head.
func (f *Firewall) addProxyRules(c *nftables.Conn, t *nftables.Table, sets tableSets, input *nftables.Chain) {
	s, egAllow := sets.proxied, sets.egress.allow
	p := f.c.Redirect
	if p == nil {
		return
	}
	accept := nftables.ChainPolicyAccept
	dnat := c.AddChain(&nftables.Chain{Name: "dnat", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	iif := f.ifMatch(expr.MetaKeyIIFNAME, expr.CmpOpEq)
	add := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: join(exprs...)})
	}
	notAllowed := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Payload{DestRegister: 2, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: egAllow.Name, SetID: egAllow.ID, Invert: true},
	}
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		add(dnat, iif, ipv4(), inProxied(s), l4proto(proto), dport(53), redirectTo(p.DNSPort))
	}
	for _, port := range []uint16{80, 443} {
		add(dnat, iif, ipv4(), inProxied(s), l4proto(unix.IPPROTO_TCP), dport(port), notAllowed, redirectTo(p.ProxyPort))
	}
	notIf := f.ifMatch(expr.MetaKeyIIFNAME, expr.CmpOpNeq)
	for _, r := range []struct {
		proto byte
		port  uint16
	}{{unix.IPPROTO_UDP, p.DNSPort}, {unix.IPPROTO_TCP, p.DNSPort}, {unix.IPPROTO_TCP, p.ProxyPort}} {
		// Inserted at the head: members reach the listeners, other
		// interfaces (the LAN) do not; loopback stays open for the host.
		// Only connections to the port are refused, not the replies to
		// one the host made from it: once the listener is gone (a table
		// outlives its server, or belongs to another scope), the port is
		// any process's ephemeral port again, and dropping its replies
		// hung that connect (docs/benchmarks.md, "a lost sandbox").
		c.InsertRule(&nftables.Rule{Table: t, Chain: input,
			Exprs: join(iif, ipv4(), inProxied(s), l4proto(r.proto), dport(r.port), verdict(expr.VerdictAccept))})
		c.InsertRule(&nftables.Rule{Table: t, Chain: input,
			Exprs: join(notIf, notLoopback(), l4proto(r.proto), dport(r.port), ctNotEstablished(), verdict(expr.VerdictDrop))})
	}
}

// Blocked reports whether a is a destination no sandbox ever reaches
// whatever its policy: the fixed blocked ranges, the host's own networks
// and gateways, the operator's deny list, and every IPv6 address (the
// proxy serves sandboxes with domain rules, whose IPv6 is refused: it
// dials IPv4 only). The egress proxy checks it before dialling for a
// sandbox.
func (f *Firewall) Blocked(a netip.Addr) bool {
	a = a.Unmap()
	if !a.Is4() || f.c.Subnet.Contains(a) {
		return true
	}
	for _, p := range blockedV4 {
		if p.Contains(a) {
			return true
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.deny {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func notLoopback() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifnameKey("lo")},
	}
}
