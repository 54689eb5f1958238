package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
)

// Recover rebuilds the allocator from the host-side veths of the sandboxes in
// live and removes every netns, veth and set member in m's scope that belongs
// to any other ID, and the conntrack entries of every other address in the
// scope. It is meant for server start, before any Setup.
func (m *Manager) Recover(ctx context.Context, live []string) error {
	liveIf := map[string]string{} // host ifname → id
	for _, id := range live {
		if validID(id) == nil {
			liveIf[m.o.hostIf(id)] = id
		}
	}
	var errs []error
	// Namespaces first: an orphaned netns takes its veth peer down with it.
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("list %s: %w", netnsDir, err))
	}
	for _, e := range entries {
		id, ok := strings.CutPrefix(e.Name(), m.o.netnsPrefix)
		if !ok || validID(id) != nil || liveIf[m.o.hostIf(id)] == id {
			continue
		}
		m.log.InfoContext(ctx, "removing orphaned netns", "sandbox", id)
		errs = append(errs, m.Teardown(ctx, id))
	}
	links, err := netlink.LinkList()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list links: %w", err))...)
	}
	m.mu.Lock()
	m.alloc = newAllocator(m.o.subnet)
	m.internet = map[string]bool{}
	m.mu.Unlock()
	allowed, err := m.fw.AllowedIfs()
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		name := l.Attrs().Name
		if _, isVeth := l.(*netlink.Veth); !isVeth || !strings.HasPrefix(name, m.o.ifPrefix) {
			continue
		}
		id, ok := liveIf[name]
		if !ok {
			m.log.InfoContext(ctx, "removing orphaned veth", "if", name)
			errs = append(errs, deleteLink(name), m.fw.SetAllowed(name, false), m.fw.Unbind(name), m.fw.ClearEgress(name))
			continue
		}
		errs = append(errs, m.adopt(id, l, allowed[name]))
	}
	for name := range allowed {
		if _, ok := liveIf[name]; !ok && strings.HasPrefix(name, m.o.ifPrefix) {
			errs = append(errs, m.fw.SetAllowed(name, false))
		}
	}
	isLive := func(ifname string) bool { _, ok := liveIf[ifname]; return ok }
	errs = append(errs, m.fw.UnbindStale(isLive), m.fw.ClearStaleEgress(isLive), m.sweepStale(ctx))
	return errors.Join(errs...)
}

// adopt registers a live sandbox's /30 from its host-side address.
func (m *Manager) adopt(id string, l netlink.Link, internet bool) error {
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("sandbox %s: addresses: %w", id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok {
			continue
		}
		if slot, ok := m.alloc.slotOf(ip); ok {
			m.alloc.claim(id, slot)
			m.internet[id] = internet
			_, sandbox := m.alloc.addrs(slot)
			var sandbox6 netip.Addr
			if m.v6 {
				sandbox6 = m.o.mapTo6(sandbox)
			}
			if err := m.fw.Bind(l.Attrs().Name, sandbox, sandbox6); err != nil {
				return fmt.Errorf("sandbox %s: %w", id, err)
			}
			return nil
		}
	}
	return fmt.Errorf("sandbox %s: veth %s has no address in %s", id, l.Attrs().Name, m.o.subnet)
}
