package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/cleanup"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/netpolicy/firewall"
)

// netnsDir is where named network namespaces live, as with `ip netns add`.
const netnsDir = "/run/netns"

// Manager owns the sandboxes' networks on this host. It is safe for
// concurrent use with different IDs.
type Manager struct {
	log *slog.Logger
	o   options

	mu         sync.Mutex
	alloc      *allocator        // guarded by mu
	internet   map[string]bool   // id → egress allowed; guarded by mu
	egress     map[string]Egress // id → policy set by SetEgress, applied by Setup; guarded by mu
	forwarding bool              // ip_forward switched on by us; guarded by mu
	forward6   bool              // IPv6 forwarding on (by us or before); guarded by mu
	v6         bool              // the host has IPv6: sandboxes get IPv6 addresses

	fw *firewall.Firewall // the scope's nftables tables
	ct *ctSweeper         // freed slots whose conntrack entries are still to delete (conntrack_linux.go)

	done      chan struct{} // closed by Close: stops the host network watcher
	watching  sync.WaitGroup
	closeOnce sync.Once
}

// New installs the nftables tables (replacing older copies atomically, but
// keeping the members of their sets), starts watching the host's addresses
// and routes to keep the hostnets chain current, and returns a Manager with
// an empty allocator: call Recover before Setup after a restart.
// Close stops the watcher and removes the tables again when no sandbox is left.
func New(log *slog.Logger, opts ...Option) (*Manager, error) {
	if log == nil {
		log = slog.Default()
	}
	o := defaultOptions()
	for _, f := range withHostDefaults(opts) {
		f(&o)
	}
	if len(o.ifPrefix) != 2 || !o.subnet.Addr().Is4() || o.subnet.Bits() > 30 || !validSubnet6(o.subnet6) {
		return nil, fmt.Errorf("netpolicy: bad scope: if prefix %q, subnet %s, IPv6 prefix %s", o.ifPrefix, o.subnet, o.subnet6)
	}
	m := &Manager{log: log.With("component", "netpolicy"), o: o, v6: ipv6Available(),
		alloc: newAllocator(o.subnet), internet: map[string]bool{}, egress: map[string]Egress{}, done: make(chan struct{}),
		ct: newCTSweeper()}
	if !m.v6 {
		m.log.Info("the host has no IPv6: sandboxes get IPv4 only")
	}
	if err := sharedMountDir(netnsDir); err != nil {
		return nil, fmt.Errorf("netpolicy: %s: %w", netnsDir, err)
	}
	deny, err := m.computeDeny()
	if err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	m.fw = firewall.New(m.firewallConfig(), deny)
	if err := m.fw.Install(); err != nil {
		return nil, err
	}
	if err := raiseNeighbourLimits(m.log, "/proc/sys"); err != nil { // neigh_linux.go
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	m.watching.Add(2)
	go func() {
		defer m.watching.Done()
		m.watchHostNets(m.done)
	}()
	go func() {
		defer m.watching.Done()
		m.ct.run(context.Background(), m, m.done)
	}()
	if o.proxy != nil && o.proxy.UseBlocked != nil {
		o.proxy.UseBlocked(m.Blocked)
	}
	return m, nil
}

// Close stops watching the host's networks (the hostnets chain keeps its last
// contents until the next New) and deletes the nftables tables if no sandbox
// network exists any more; it leaves them alone otherwise, so a server
// restart keeps sandboxes online. The default (server) tables are never
// deleted: a server stopping while the next one starts would otherwise remove
// the new server's firewall, and they match nothing once no sandbox interface
// exists.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() { close(m.done) })
	m.watching.Wait()
	m.mu.Lock()
	n := len(m.alloc.byID)
	m.mu.Unlock()
	if n > 0 || m.o.table == defaultOptions().table {
		return nil
	}
	return m.fw.Delete()
}

// firewallConfig names the scope's nftables objects.
func (m *Manager) firewallConfig() firewall.Config {
	c := firewall.Config{Table: m.o.table, IfPrefix: m.o.ifPrefix, Subnet: m.o.subnet, Subnet6: m.o.sandboxes6()}
	if p := m.o.proxy; p != nil {
		c.Redirect = &firewall.Redirect{DNSPort: p.DNSPort, ProxyPort: p.ProxyPort}
	}
	return c
}

// ensureTable reinstalls the table if something removed it since New: no
// sandbox network is ever set up without its firewall.
func (m *Manager) ensureTable() error {
	ok, err := m.fw.Present()
	if err != nil || ok {
		return err
	}
	m.log.Warn("nftables table missing, reinstalling", "table", m.o.table)
	return m.fw.Install()
}

// Lookup returns the network of a sandbox set up (or recovered) by m.
func (m *Manager) Lookup(id string) (*Net, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	slot, ok := m.alloc.byID[id]
	if !ok {
		return nil, false
	}
	return m.netOf(id, slot), true
}

// addrs are n's host and sandbox addresses, IPv6 ones when it has them.
func (n *Net) addrs() []netip.Addr {
	out := []netip.Addr{n.HostAddr, n.SandboxAddr}
	if n.HostAddr6.IsValid() {
		out = append(out, n.HostAddr6, n.SandboxAddr6)
	}
	return out
}

// netOf builds the Net for id at slot; mu must be held.
func (m *Manager) netOf(id string, slot int) *Net {
	h, s := m.alloc.addrs(slot)
	n := &Net{ID: id, NSPath: filepath.Join(netnsDir, m.o.netnsName(id)), HostIf: m.o.hostIf(id),
		HostAddr: h, SandboxAddr: s, Prefix: 30, Internet: m.internet[id]}
	if m.v6 {
		n.HostAddr6, n.SandboxAddr6 = m.o.mapTo6(h), m.o.mapTo6(s)
	}
	return n
}

// Setup creates the sandbox's netns, veth pair, addresses and routes, and
// admits it to the internet when allowInternet. On error nothing is left
// behind. Errors: ErrInvalidArgument (bad id), ErrAlreadyExists,
// ErrResourceExhausted (subnet full).
func (m *Manager) Setup(ctx context.Context, id string, allowInternet bool) (_ *Net, retErr error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if err := m.ensureTable(); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	var undo cleanup.Stack
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, undo.Run())
		}
	}()
	slot, err := m.allocate(ctx, id)
	m.mu.Lock()
	policy, hasPolicy := m.egress[id]
	if hasPolicy {
		allowInternet = policy.Internet
	}
	if err == nil {
		m.internet[id] = allowInternet
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	undo.Push(func() error { m.release(id, true); return nil })
	m.mu.Lock()
	n := m.netOf(id, slot)
	m.mu.Unlock()

	steps := newSteps()
	if err := createNetns(m.o.netnsName(id), m.v6); err != nil {
		return nil, fmt.Errorf("sandbox %s: create netns: %w", id, err)
	}
	steps.step("netns")
	undo.Push(func() error { return deleteNetns(m.o.netnsName(id)) })
	if err := m.createVeth(n); err != nil {
		return nil, err
	}
	undo.Push(func() error { return deleteLink(n.HostIf) })
	steps.step("veth")
	if err := m.fw.Bind(n.HostIf, n.SandboxAddr, n.SandboxAddr6); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	undo.Push(func() error { return m.fw.Unbind(n.HostIf) })
	steps.step("bind")
	if err := configureInside(n); err != nil {
		return nil, err
	}
	steps.step("inside")
	if hasPolicy {
		undo.Push(func() error { return errors.Join(m.fw.ClearEgress(n.HostIf), m.fw.SetAllowed(n.HostIf, false)) })
		if err := m.applyEgress(ctx, id, policy); err != nil {
			return nil, err
		}
	} else if allowInternet {
		if err := m.enableForwarding(); err != nil {
			return nil, err
		}
		if err := m.fw.SetAllowed(n.HostIf, true); err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", id, err)
		}
		undo.Push(func() error { return m.fw.SetAllowed(n.HostIf, false) })
	}
	steps.step("policy")
	m.log.DebugContext(ctx, "network up", append([]any{"sandbox", id, "if", n.HostIf, "addr", n.SandboxAddr,
		"internet", allowInternet}, steps.attrs...)...)
	return n, nil
}

// Teardown removes the sandbox's nftables set member, veth pair and netns,
// frees its addresses and forgets its egress policy. It succeeds when there
// is nothing to remove.
func (m *Manager) Teardown(ctx context.Context, id string) error {
	return m.teardown(ctx, id, true)
}

// Suspend is Teardown for a sandbox whose network comes back with the next
// Setup (a microVM paused to disk): its egress policy stays, so a SetEgress
// made before the network is down again, or while it is, is what that Setup
// applies.
func (m *Manager) Suspend(ctx context.Context, id string) error {
	return m.teardown(ctx, id, false)
}

func (m *Manager) teardown(ctx context.Context, id string, forget bool) error {
	if err := validID(id); err != nil {
		return err
	}
	hostIf := m.o.hostIf(id)
	m.mu.Lock()
	slot, up := m.alloc.byID[id]
	m.mu.Unlock()
	err := errors.Join(
		m.fw.SetAllowed(hostIf, false),
		m.fw.ClearEgress(hostIf),
		m.fw.Unbind(hostIf),
		deleteLink(hostIf),
		deleteNetns(m.o.netnsName(id)),
	)
	if up {
		m.mu.Lock()
		n := m.netOf(id, slot)
		m.mu.Unlock()
		if m.o.proxy != nil && m.o.proxy.Rules != nil {
			m.o.proxy.Rules(n.SandboxAddr, ProxyRules{}) // before release: the slot may be reused at once
		}
		m.ct.queue(slot, n.addrs()...)
	}
	m.release(id, forget)
	if err != nil {
		return fmt.Errorf("sandbox %s: network teardown: %w", id, err)
	}
	m.log.DebugContext(ctx, "network down", "sandbox", id)
	return nil
}

// allocate reserves a slot for id: not one whose addresses are on the
// host, nor one whose conntrack entries are still to delete, unless only
// those are free; then a sweep runs first.
func (m *Manager) allocate(ctx context.Context, id string) (int, error) {
	try := func() (int, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.alloc.alloc(id, func(s int) bool {
			h, sb := m.alloc.addrs(s)
			return m.ct.isPending(s) || onHost(h) || onHost(sb)
		})
	}
	slot, err := try()
	if errors.Is(err, errdefs.ErrResourceExhausted) && m.ct.hasPending() {
		m.sweepConntrack(ctx)
		slot, err = try()
	}
	return slot, err
}

// release frees id's addresses and, with forget, its policy.
func (m *Manager) release(id string, forget bool) {
	m.mu.Lock()
	m.alloc.free(id)
	if forget {
		delete(m.internet, id)
		delete(m.egress, id)
	}
	m.mu.Unlock()
}

// createVeth makes the pair with its peer born as eth0 inside the netns, then
// addresses and raises the host side.
func (m *Manager) createVeth(n *Net) error {
	ns, err := netns.GetFromPath(n.NSPath)
	if err != nil {
		return fmt.Errorf("sandbox %s: open netns: %w", n.ID, err)
	}
	defer ns.Close()
	// One queue each way, asked for: the kernel's default is one per CPU
	// cut down to one after registration, and each cut waits for an RCU
	// grace period holding the rtnl lock, which every other sandbox's
	// network setup and teardown then waits for (~4 ms per create in a
	// burst here).
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.HostIf, NumTxQueues: 1, NumRxQueues: 1}, PeerName: "eth0",
		PeerNamespace: netlink.NsFd(int(ns)), PeerNumTxQueues: 1, PeerNumRxQueues: 1}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("sandbox %s: add veth %s: %w", n.ID, n.HostIf, err)
	}
	link, err := netlink.LinkByName(n.HostIf)
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", n.ID, err)
	}
	if err := configureHost6(link, n); err != nil {
		return fmt.Errorf("sandbox %s: %w", n.ID, err)
	}
	addr := &netlink.Addr{IPNet: ipNet(n.HostAddr, n.Prefix)}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("sandbox %s: address %s: %w", n.ID, n.HostAddr, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("sandbox %s: up %s: %w", n.ID, n.HostIf, err)
	}
	return nil
}

// Readdress puts back eth0's addresses and default routes in sandbox id's
// netns where they are missing, as Setup made them. gVisor's netstack
// takes them off the kernel's side of the namespace when runsc starts, so
// a sandbox run a second time in the same netns (a resume from a
// filesystem-only pause) needs them again. ErrNotFound without a network.
func (m *Manager) Readdress(ctx context.Context, id string) error {
	n, ok := m.Lookup(id)
	if !ok {
		return fmt.Errorf("sandbox %s: no network: %w", id, errdefs.ErrNotFound)
	}
	if err := configureInside(n); err != nil {
		return err
	}
	m.log.DebugContext(ctx, "network readdressed", "sandbox", id)
	return nil
}

// configureInside raises lo and eth0 in the netns, addresses eth0 and routes
// everything via the host side; what is already there is kept.
func configureInside(n *Net) error {
	ns, err := netns.GetFromPath(n.NSPath)
	if err != nil {
		return fmt.Errorf("sandbox %s: open netns: %w", n.ID, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("sandbox %s: netlink in netns: %w", n.ID, err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: lo up: %w", n.ID, err)
	}
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("sandbox %s: eth0: %w", n.ID, err)
	}
	if err := h.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(n.SandboxAddr, n.Prefix)}); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("sandbox %s: address %s: %w", n.ID, n.SandboxAddr, err)
	}
	if n.SandboxAddr6.IsValid() {
		a6 := &netlink.Addr{IPNet: ipNet(n.SandboxAddr6, Prefix6), Flags: unix.IFA_F_NODAD}
		if err := h.AddrAdd(eth, a6); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("sandbox %s: address %s: %w", n.ID, n.SandboxAddr6, err)
		}
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("sandbox %s: eth0 up: %w", n.ID, err)
	}
	for _, gw := range []netip.Addr{n.HostAddr, n.HostAddr6} {
		if !gw.IsValid() {
			continue
		}
		if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.IP(gw.AsSlice())}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("sandbox %s: default route via %s: %w", n.ID, gw, err)
		}
	}
	return nil
}

// enableForwarding turns on net.ipv4.ip_forward once, and IPv6 forwarding
// (see enableForwarding6) when the host has IPv6.
func (m *Manager) enableForwarding() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.v6 && !m.forward6 {
		if err := enableForwarding6(m.log, m.o.table); err != nil {
			return err
		}
		m.forward6 = true
	}
	if m.forwarding {
		return nil
	}
	const p = "/proc/sys/net/ipv4/ip_forward"
	if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == "1" {
		m.forwarding = true
		return nil
	}
	if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable ip_forward: %w", err)
	}
	m.forwarding = true
	m.log.Info("net.ipv4.ip_forward switched on for sandbox internet access; the nftables table inet " +
		m.o.table + " forwards only allowed sandboxes")
	return nil
}

// sandboxSysctls are set in every sandbox's netns. A container sandbox's
// root is root of its own user namespace only, which does not own the netns,
// so CAP_NET_BIND_SERVICE and CAP_NET_RAW do not count there: every account
// may bind ports below 1024 and send ICMP echo (ping sockets) instead, as in
// Docker.
var sandboxSysctls = map[string]string{
	"net/ipv4/ip_unprivileged_port_start": "0",
	"net/ipv4/ping_group_range":           "0 2147483647",
}

// writeSysctls writes /proc/sys values, in the calling thread's netns for
// net/ ones.
func writeSysctls(kv map[string]string) error {
	for k, v := range kv {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", k, err)
		}
	}
	return nil
}

// createNetns creates a named network namespace like `ip netns add` and
// sets sandboxSysctls (and sandboxSysctls6 when v6) in it.
func createNetns(name string, v6 bool) error {
	err := onThread(func() error {
		ns, err := netns.NewNamed(name) // enters it
		if err != nil {
			return err // deleteNetns below removes a half-made file
		}
		return ns.Close()
	}, func() error {
		if v6 {
			if err := writeSysctls(sandboxSysctls6); err != nil {
				return err
			}
		}
		return writeSysctls(sandboxSysctls)
	})
	if err != nil {
		_ = deleteNetns(name)
		return fmt.Errorf("netns %s: %w", name, err)
	}
	return nil
}

// InNetns runs fn on an OS thread that has entered the network namespace
// at nsPath (for what only a thread inside can do: mount its sysfs, write
// its sysctls).
func InNetns(nsPath string, fn func() error) error {
	return onThread(func() error {
		ns, err := netns.GetFromPath(nsPath)
		if err != nil {
			return fmt.Errorf("open netns %s: %w", nsPath, err)
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("enter netns %s: %w", nsPath, err)
		}
		return nil
	}, fn)
}

// onThread runs enter, then (if it succeeded) fn, on a locked OS thread,
// then returns the thread to its original netns. A thread that cannot
// return is thrown away with its goroutine.
func onThread(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // no unlock on failure: the thread dies with the goroutine
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("current netns: %w", err)
			return
		}
		defer orig.Close()
		err = enter()
		if err == nil {
			err = fn()
		}
		if serr := netns.Set(orig); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("back to host netns: %w", serr))
			return
		}
		goruntime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// deleteNetns unmounts and removes a named netns; absent is fine.
func deleteNetns(name string) error { return removeMountFile(filepath.Join(netnsDir, name)) }

// removeMountFile unmounts what is mounted on file p and removes it;
// absent is fine.
func removeMountFile(p string) error {
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// deleteLink removes a link by name; absent is fine.
func deleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	return nil
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, a.BitLen())}
}

// onHost reports whether a is an address of one of the host's interfaces
// (the kernel's local table routes it to the host itself, up or down), so
// that a /30 left behind by another process is never handed out twice. One
// route lookup: listing every address of the host instead grew with the
// number of sandboxes, each of whose host-side veths has one.
func onHost(a netip.Addr) bool {
	routes, err := netlink.RouteGet(a.AsSlice())
	return err == nil && len(routes) > 0 && routes[0].Type == unix.RTN_LOCAL
}

// steps times the phases of a Setup for its debug log.
type steps struct {
	last  time.Time
	attrs []any
}

func newSteps() *steps { return &steps{last: time.Now()} }

func (s *steps) step(name string) {
	now := time.Now()
	s.attrs = append(s.attrs, name, now.Sub(s.last).Round(time.Microsecond))
	s.last = now
}
