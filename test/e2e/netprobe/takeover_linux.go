package main

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// takeover does what root would do to lift a firewall that lived inside
// the sandbox: delete every nftables table (iptables-nft's included) and
// the whole ruleset, put its own default route in place and give itself
// another address. In a container sandbox most of it is refused (no
// CAP_NET_ADMIN); in a microVM it succeeds, in the guest's own kernel.
func takeover(addr string) map[string]string {
	res := map[string]string{}
	res["nftables"] = flushNftables()
	link, gw, err := defaultLink()
	if err != nil {
		res["routes"] = "error: " + err.Error()
		return res
	}
	res["routes"] = outcome(fmt.Sprintf("default via %s dev %s", gw, link.Attrs().Name), replaceRoutes(link, gw))
	ip := net.ParseIP(addr)
	if ip == nil {
		res["address"] = "error: not an IP: " + addr
		return res
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}}
	res["address"] = outcome("added "+addr, netlink.AddrAdd(link, a))
	return res
}

func flushNftables() string {
	c, err := nftables.New()
	if err != nil {
		return "error: " + err.Error()
	}
	tables, err := c.ListTables()
	if err != nil {
		return "error: list: " + err.Error()
	}
	var names []string
	for _, t := range tables {
		names = append(names, t.Name)
		c.DelTable(t)
	}
	c.FlushRuleset()
	return outcome(fmt.Sprintf("deleted %d tables [%s] and flushed the ruleset", len(names), strings.Join(names, " ")), c.Flush())
}

// defaultLink returns the link of the IPv4 default route and its gateway.
func defaultLink() (netlink.Link, net.IP, error) {
	routes, err := netlink.RouteList(nil, unix.AF_INET)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range routes {
		if r.Gw != nil && (r.Dst == nil || r.Dst.IP.IsUnspecified()) {
			l, err := netlink.LinkByIndex(r.LinkIndex)
			return l, r.Gw, err
		}
	}
	return nil, nil, errors.New("no IPv4 default route")
}

// replaceRoutes deletes every IPv4 route of link (its connected route
// too) and adds an on-link default route via gw, as if the sandbox picked
// its own next hop.
func replaceRoutes(link netlink.Link, gw net.IP) error {
	routes, err := netlink.RouteList(link, unix.AF_INET)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range routes {
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", r.Dst, err))
		}
	}
	def := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw, Flags: int(netlink.FLAG_ONLINK)}
	if err := netlink.RouteReplace(def); err != nil {
		errs = append(errs, fmt.Errorf("add default: %w", err))
	}
	return errors.Join(errs...)
}
