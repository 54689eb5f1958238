package netpolicy

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IPv6 host plumbing: when the host has IPv6 a sandbox gets an address of
// the scope's ULA prefix on its eth0 and the host side of its veth is its
// gateway (see Net and mapTo6); forwarding it needs the host's IPv6
// forwarding, which changes how the host treats router advertisements.

const ipv6Conf = "/proc/sys/net/ipv6/conf"

// ipv6Available reports whether the host's kernel has IPv6 switched on.
func ipv6Available() bool {
	b, err := os.ReadFile(filepath.Join(ipv6Conf, "all", "disable_ipv6"))
	return err == nil && strings.TrimSpace(string(b)) == "0"
}

// sandboxSysctls6 are set in every sandbox's netns when the host has IPv6:
// addresses are usable at once (no duplicate address detection: the /126
// holds two addresses Moat assigned), and nothing configures itself from
// router advertisements. A container sandbox's root cannot change them (it
// does not own the netns).
var sandboxSysctls6 = map[string]string{
	"net/ipv6/conf/all/accept_dad":     "0",
	"net/ipv6/conf/default/accept_dad": "0",
	"net/ipv6/conf/all/accept_ra":      "0",
	"net/ipv6/conf/default/accept_ra":  "0",
	"net/ipv6/conf/default/autoconf":   "0",
}

// configureHost6 prepares the host side of n's veth (still down): without
// IPv6 for n it disables IPv6 there (no link-local path to the host);
// otherwise it gives it n.HostAddr6/126 and no link-local address, and
// makes it ignore router advertisements and skip duplicate address
// detection.
func configureHost6(link netlink.Link, n *Net) error {
	conf := func(key, val string) error {
		p := filepath.Join(ipv6Conf, link.Attrs().Name, key)
		if err := os.WriteFile(p, []byte(val), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", p, err)
		}
		return nil
	}
	if !n.HostAddr6.IsValid() {
		_ = conf("disable_ipv6", "1") // best effort, as before IPv6 egress: absent IPv6 is fine
		return nil
	}
	// IN6_ADDR_GEN_MODE_NONE: no fe80:: address on the host side, so a
	// sandbox has no link-local address of the host to talk to.
	err := errors.Join(conf("accept_ra", "0"), conf("accept_dad", "0"), conf("autoconf", "0"),
		conf("addr_gen_mode", "1"), conf("disable_ipv6", "0"))
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: ipNet(n.HostAddr6, Prefix6), Flags: unix.IFA_F_NODAD}
	if err := netlink.AddrAdd(link, a); err != nil {
		return fmt.Errorf("address %s: %w", n.HostAddr6, err)
	}
	return nil
}

// enableForwarding6 switches on net.ipv6.conf.all.forwarding unless it is
// on already. A forwarding interface ignores router advertisements when its
// accept_ra is 1, so the host could lose an IPv6 default route it learnt
// from them: every interface with accept_ra 1 that does not forward yet is
// switched to accept_ra 2 (accept them while forwarding) first, and logged.
// Interfaces created later keep the kernel's default.
func enableForwarding6(log *slog.Logger, table string) error {
	const all = ipv6Conf + "/all/forwarding"
	if b, err := os.ReadFile(all); err == nil && strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	entries, err := os.ReadDir(ipv6Conf)
	if err != nil {
		return fmt.Errorf("enable IPv6 forwarding: %w", err)
	}
	var kept []string
	for _, e := range entries {
		name := e.Name()
		if name == "all" || name == "default" {
			continue
		}
		ra, _ := os.ReadFile(filepath.Join(ipv6Conf, name, "accept_ra"))
		fwd, _ := os.ReadFile(filepath.Join(ipv6Conf, name, "forwarding"))
		if strings.TrimSpace(string(ra)) != "1" || strings.TrimSpace(string(fwd)) != "0" {
			continue
		}
		if err := os.WriteFile(filepath.Join(ipv6Conf, name, "accept_ra"), []byte("2"), 0o644); err != nil {
			return fmt.Errorf("enable IPv6 forwarding: keep router advertisements on %s: %w", name, err)
		}
		kept = append(kept, name)
	}
	if len(kept) > 0 {
		log.Info("net.ipv6.conf.<if>.accept_ra set to 2 so these interfaces keep accepting router advertisements with IPv6 forwarding on",
			"interfaces", strings.Join(kept, ","))
	}
	if err := os.WriteFile(all, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable IPv6 forwarding: %w", err)
	}
	log.Info("net.ipv6.conf.all.forwarding switched on for sandbox internet access; the nftables table inet " +
		table + " forwards only allowed sandboxes")
	return nil
}
