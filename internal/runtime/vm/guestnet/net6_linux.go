package guestnet

import (
	"fmt"
	"net"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// setupGuestNet6 runs in the sandbox's netns: the tap gets TapAddr6/126 (the
// guest's IPv6 gateway), the netns forwards IPv6, and table ip6 moatvm6
// masquerades the guest's IPv6 traffic leaving eth0 to the sandbox's own
// IPv6 address. Nothing is mapped inward: the host never opens IPv6
// connections to a guest.
func setupGuestNet6(nsFd int, tap netlink.Link) error {
	ipn := &net.IPNet{IP: net.IP(TapAddr6.AsSlice()), Mask: net.CIDRMask(GuestPrefix6, 128)}
	if err := netlink.AddrAdd(tap, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
		return fmt.Errorf("address %s: %w", TapAddr6, err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("IPv6 forwarding in netns: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(nsFd))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv6, Name: natTable6})
	post := c.AddChain(&nftables.Chain{Name: "post", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	g := GuestAddr6.As16()
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("eth0")},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 16},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: g[:]},
		&expr.Masq{},
	}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables ip6 NAT in netns: %w", err)
	}
	return nil
}

// ICMPv6 neighbour discovery types the guard looks at.
const (
	icmp6NeighSolicit = 135
	icmp6NeighAdvert  = 136
)

// guard6Rules are the tap guard's accept rules for IPv6 frames (isIPv6
// matches the ethertype): packets from GuestAddr6, except a neighbour
// advertisement for another target, and neighbour solicitations from a
// link-local address with hop limit 255. Whatever they do not accept
// falls to the chain's counter and drop policy.
func guard6Rules(isIPv6 []expr.Any) [][]expr.Any {
	g := GuestAddr6.As16()
	src := func(off uint32, want []byte, mask []byte) []expr.Any {
		e := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(want))}}
		if mask != nil {
			e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(want)), Mask: mask, Xor: make([]byte, len(want))})
		}
		return append(e, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: want})
	}
	own := src(8, g[:], nil)
	linkLocal := src(8, []byte{0xfe, 0x80}, []byte{0xff, 0xc0})
	l4 := func(op expr.CmpOp, p byte) []expr.Any {
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: []byte{p}}}
	}
	typ := func(op expr.CmpOp, t byte) []expr.Any {
		return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			&expr.Cmp{Op: op, Register: 1, Data: []byte{t}}}
	}
	target := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 8, Len: 16},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: g[:]}}
	hop255 := src(7, []byte{255}, nil)
	accept := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	cat := func(parts ...[]expr.Any) []expr.Any {
		var out []expr.Any
		for _, p := range append([][]expr.Any{isIPv6}, parts...) {
			out = append(out, p...)
		}
		return out
	}
	return [][]expr.Any{
		cat(own, l4(expr.CmpOpNeq, unix.IPPROTO_ICMPV6), accept),
		cat(own, l4(expr.CmpOpEq, unix.IPPROTO_ICMPV6), typ(expr.CmpOpNeq, icmp6NeighAdvert), accept),
		cat(own, l4(expr.CmpOpEq, unix.IPPROTO_ICMPV6), typ(expr.CmpOpEq, icmp6NeighAdvert), target, accept),
		cat(linkLocal, l4(expr.CmpOpEq, unix.IPPROTO_ICMPV6), typ(expr.CmpOpEq, icmp6NeighSolicit), hop255, accept),
	}
}
