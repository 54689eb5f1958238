package guestnet

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	goruntime "runtime"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The guest's network, identical in every sandbox so that clones of one
// snapshot need no reconfiguration.
// The IPv6 pair is a /126 of Moat's ULA prefix outside every sandbox
// range (netpolicy maps IPv4 addresses into its ::/96 part; this is
// fd6d:6f61:7400:ffff::/64).
var (
	GuestAddr  = netip.MustParseAddr("169.254.100.2")
	TapAddr    = netip.MustParseAddr("169.254.100.1")
	GuestAddr6 = netip.MustParseAddr("fd6d:6f61:7400:ffff::2")
	TapAddr6   = netip.MustParseAddr("fd6d:6f61:7400:ffff::1")
)

const (
	GuestPrefix  = 30
	GuestPrefix6 = 126
	natTable6    = "moatvm6"
	TapName      = "tap0"
	GuestMAC     = "52:54:00:64:00:02"
	tapMAC       = "52:54:00:64:00:01"
	natTable     = "moatvm"
	GuardTable   = "moatvmguard"
)

// Setup runs inside the sandbox's netns (nsPath): a persistent tap
// for QEMU, owned by uid and gid (QEMU's, so that it can attach without
// CAP_NET_ADMIN; 0 for a QEMU running as root), forwarding, nftables NAT
// that maps sandboxAddr to the guest and masquerades the guest's own
// traffic, and the guest's anti-spoofing rules (installGuard). With IPv6
// (sandboxAddr6 valid) the tap is also the guest's IPv6 gateway and the
// guest's IPv6 traffic is masqueraded to sandboxAddr6 (setupGuestNet6).
// Everything dies with the netns.
func Setup(nsPath string, sandboxAddr, sandboxAddr6 netip.Addr, uid, gid int) error {
	return inNetns(nsPath, func(ns netns.NsHandle) error {
		tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: TapName}, Mode: netlink.TUNTAP_MODE_TAP,
			Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_ONE_QUEUE, Owner: uint32(uid), Group: uint32(gid)}
		if err := netlink.LinkAdd(tap); err != nil {
			return fmt.Errorf("add %s: %w", TapName, err)
		}
		link, err := netlink.LinkByName(TapName)
		if err != nil {
			return fmt.Errorf("%s: %w", TapName, err)
		}
		// A fixed MAC: the guest's neighbour cache in the snapshot stays right.
		mac, _ := net.ParseMAC(tapMAC)
		if err := netlink.LinkSetHardwareAddr(link, mac); err != nil {
			return fmt.Errorf("%s mac: %w", TapName, err)
		}
		ipn := &net.IPNet{IP: net.IP(TapAddr.AsSlice()), Mask: net.CIDRMask(GuestPrefix, 32)}
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipn}); err != nil {
			return fmt.Errorf("address %s: %w", TapAddr, err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("%s up: %w", TapName, err)
		}
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("ip_forward in netns: %w", err)
		}
		if err := installNAT(int(ns), sandboxAddr); err != nil {
			return err
		}
		if sandboxAddr6.IsValid() {
			if err := setupGuestNet6(int(ns), link); err != nil {
				return err
			}
		}
		return installGuard(int(ns))
	})
}

// inNetns runs f on a locked OS thread switched into the netns at path.
func inNetns(path string, f func(ns netns.NsHandle) error) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", path, err)
			return
		}
		ferr := f(ns)
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("leave netns: %w (thread discarded)", err) // the thread stays locked and exits
			return
		}
		goruntime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// installNAT adds table ip moatvm: prerouting DNAT sandboxAddr → guest,
// postrouting masquerade of the guest's traffic leaving eth0.
func installNAT(nsFd int, sandboxAddr netip.Addr) error {
	c, err := nftables.New(nftables.WithNetNSFd(nsFd))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: natTable})
	pre := c.AddChain(&nftables.Chain{Name: "pre", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	post := c.AddChain(&nftables.Chain{Name: "post", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	sb, g := sandboxAddr.As4(), GuestAddr.As4()
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("eth0")},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: sb[:]},
		&expr.Immediate{Register: 1, Data: g[:]},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}})
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("eth0")},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: g[:]},
		&expr.Masq{},
	}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables in netns: %w", err)
	}
	return nil
}

// installGuard adds table netdev moatvmguard: on the tap's ingress (what
// the guest sends) only IPv4 from the guest's address, ARP naming it as
// sender and the guest's IPv6 (guard6Rules) pass; everything else (another
// source address, forged neighbour advertisements, other ethertypes) is
// counted and dropped. Defence in depth: the host drops
// forged sources at the sandbox's veth too (netpolicy's antispoof), but a
// packet from a forged source never reaches this namespace's NAT here.
func installGuard(nsFd int) error {
	c, err := nftables.New(nftables.WithNetNSFd(nsFd))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyNetdev, Name: GuardTable})
	policy := nftables.ChainPolicyDrop
	in := c.AddChain(&nftables.Chain{Name: "guest", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookIngress, Priority: nftables.ChainPriorityFilter, Device: TapName, Policy: &policy})
	g := GuestAddr.As4()
	proto := func(etherType uint16) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, etherType)},
		}
	}
	// IPv4 whose source is the guest's address passes, other IPv4 is
	// counted and dropped (the first counter: forged sources).
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: append(proto(unix.ETH_P_IP),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: g[:]},
		&expr.Verdict{Kind: expr.VerdictAccept})})
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: append(proto(unix.ETH_P_IP),
		&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})})
	// Ethernet/IPv4 ARP whose sender protocol address is the guest's.
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: append(proto(unix.ETH_P_ARP),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 14, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: g[:]},
		&expr.Verdict{Kind: expr.VerdictAccept})})
	for _, r := range guard6Rules(proto(unix.ETH_P_IPV6)) {
		c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: r})
	}
	// The rest (forged ARP, forged IPv6, other ethertypes) is dropped by
	// the policy; count it first.
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: []expr.Any{&expr.Counter{}}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables guard in netns: %w", err)
	}
	return nil
}

func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// Listen opens a TCP listener on the tap's address (TapAddr:port) inside
// the namespace at nsPath, for a server of the guest that runs in a
// namespace of its own (the volume server): the socket belongs to the
// sandbox's namespace wherever its descriptor goes, and only the guest
// reaches that address. The caller owns the returned descriptor.
func Listen(nsPath string, port int) (*os.File, error) {
	var f *os.File
	err := inNetns(nsPath, func(netns.NsHandle) error {
		ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IP(TapAddr.AsSlice()), Port: port})
		if err != nil {
			return fmt.Errorf("listen on %s:%d: %w", TapAddr, port, err)
		}
		defer ln.Close()
		f, err = ln.File()
		return err
	})
	return f, err
}
