package netpolicy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// A sandbox's conntrack entries outlive its network. A microVM's or
// gVisor's network stack vanishes without a FIN, and a host socket closed
// after the veth is gone sends nothing through conntrack, so such an entry
// stays ESTABLISHED for nf_conntrack_tcp_timeout_established (five days)
// and a busy host fills nf_conntrack_max with them. Teardown queues the
// freed slot; a sweeper deletes the entries of every queued address in one
// pass (netlink dumps the whole table and deletes the matches, so a pass
// per kill would make a mass kill O(n·table)), and the slot is not handed
// out again until its entries are gone.

// ctDebounce is how long the sweeper waits after a teardown for more to
// batch into one pass. A pass walks the whole conntrack hash table (all
// nf_conntrack_buckets, 262,144 here) per address family it dumps, ~42 ms
// for IPv4 on this 2-core host (BenchmarkSweep: 100 addresses among 3,000
// other entries), whatever it deletes.
const ctDebounce = 2 * time.Second

// ctSweeper holds the slots whose conntrack entries are still to delete.
type ctSweeper struct {
	mu      sync.Mutex
	pending map[int][]netip.Addr // slot → its host and sandbox addresses
	kick    chan struct{}        // one buffered wake-up for the sweeper
	pass    sync.Mutex           // one pass at a time; guards h
	// h keeps one netlink socket for a pass's dump and deletes (a zero
	// Handle, like the package's functions, opens a socket per deleted
	// entry); nil until the first pass, and while it cannot be made.
	h *netlink.Handle
	// del deletes what f matches; nil means deleteEntries through h
	// (tests watch a pass with it).
	del func(f addrFilter) (uint, error)
}

func newCTSweeper() *ctSweeper {
	return &ctSweeper{pending: map[int][]netip.Addr{}, kick: make(chan struct{}, 1)}
}

// queue records slot's addresses and wakes the sweeper.
func (s *ctSweeper) queue(slot int, addrs ...netip.Addr) {
	s.mu.Lock()
	for _, a := range addrs {
		if a.IsValid() {
			s.pending[slot] = append(s.pending[slot], a)
		}
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// isPending reports whether slot's entries are still to delete.
func (s *ctSweeper) isPending(slot int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pending[slot]
	return ok
}

// hasPending reports whether any slot waits for a pass.
func (s *ctSweeper) hasPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) > 0
}

// sweep deletes the conntrack entries of the addresses queued when it
// starts and then releases their slots (not before: a sandbox given the
// slot meanwhile would lose its own entries), also when the deletion
// failed (the entries then age out): a slot is never lost to the pool.
func (s *ctSweeper) sweep() (deleted uint, err error) {
	s.pass.Lock()
	defer s.pass.Unlock()
	s.mu.Lock()
	f, slots := addrFilter{}, make([]int, 0, len(s.pending))
	for slot, addrs := range s.pending {
		slots = append(slots, slot)
		for _, a := range addrs {
			f[a] = true
		}
	}
	s.mu.Unlock()
	if len(slots) == 0 {
		return 0, nil
	}
	if s.del != nil {
		deleted, err = s.del(f)
	} else {
		deleted, err = deleteEntries(s.handle(), f, f.families()...)
	}
	s.mu.Lock()
	for _, slot := range slots {
		delete(s.pending, slot)
	}
	s.mu.Unlock()
	return deleted, err
}

// handle returns s.h, made on first use; if it cannot be made, a zero
// Handle (a socket per request), and the next pass tries again. pass is
// held.
func (s *ctSweeper) handle() *netlink.Handle {
	if s.h == nil {
		h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
		if err != nil {
			return &netlink.Handle{}
		}
		s.h = h
	}
	return s.h
}

// closeHandle closes s.h (a later pass makes another).
func (s *ctSweeper) closeHandle() {
	s.pass.Lock()
	defer s.pass.Unlock()
	if s.h != nil {
		s.h.Close()
		s.h = nil
	}
}

// deleteEntries deletes the conntrack entries f matches in the tables of
// families, through h (a zero Handle: a netlink socket per request).
func deleteEntries(h *netlink.Handle, f netlink.CustomConntrackFilter, families ...netlink.InetFamily) (deleted uint, err error) {
	for _, family := range families {
		n, ferr := h.ConntrackDeleteFilters(netlink.ConntrackTable, family, f)
		deleted += n
		err = errors.Join(err, ferr)
	}
	return deleted, err
}

// run sweeps after each kick (and the queued ones once more when done
// closes).
func (s *ctSweeper) run(ctx context.Context, m *Manager, done <-chan struct{}) {
	for {
		select {
		case <-done:
			m.sweepConntrack(ctx)
			s.closeHandle()
			return
		case <-s.kick:
		}
		select {
		case <-done:
		case <-time.After(ctDebounce):
		}
		m.sweepConntrack(ctx)
	}
}

// sweepConntrack runs one pass and logs what it did.
func (m *Manager) sweepConntrack(ctx context.Context) {
	start := time.Now()
	n, err := m.ct.sweep()
	if err != nil {
		m.log.WarnContext(ctx, "deleting freed addresses' conntrack entries", "deleted", n, "err", err)
		return
	}
	if n > 0 {
		m.log.DebugContext(ctx, "freed addresses' conntrack entries deleted", "deleted", n, "took", time.Since(start).Round(time.Millisecond))
	}
}

// sweepStale deletes the conntrack entries in the scope's ranges that are
// not a live sandbox's: those a crashed server, or one from before
// teardowns swept them, left behind. For Recover, when the allocator holds
// exactly the live sandboxes.
func (m *Manager) sweepStale(ctx context.Context) error {
	f := scopeFilter{ranges: []netip.Prefix{m.o.subnet}, live: addrFilter{}}
	if m.v6 {
		f.ranges = append(f.ranges, m.o.sandboxes6())
	}
	m.mu.Lock()
	for id, slot := range m.alloc.byID {
		for _, a := range m.netOf(id, slot).addrs() {
			f.live[a] = true
		}
	}
	m.mu.Unlock()
	families := []netlink.InetFamily{nl.FAMILY_V4}
	if m.v6 {
		families = append(families, nl.FAMILY_V6)
	}
	m.ct.pass.Lock()
	deleted, err := deleteEntries(m.ct.handle(), f, families...)
	m.ct.pass.Unlock()
	if deleted > 0 {
		m.log.InfoContext(ctx, "deleted stale conntrack entries of the scope's addresses", "deleted", deleted)
	}
	return err
}

// scopeFilter matches the entries with an address in one of ranges that
// is not in live, at either end.
type scopeFilter struct {
	ranges []netip.Prefix
	live   addrFilter
}

func (f scopeFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	for _, ip := range flowAddrs(flow) {
		for _, r := range f.ranges {
			if r.Contains(ip) && !f.live[ip] {
				return true
			}
		}
	}
	return false
}

// flowAddrs are the addresses at both ends of flow, in both directions.
func flowAddrs(flow *netlink.ConntrackFlow) []netip.Addr {
	out := make([]netip.Addr, 0, 4)
	for _, ip := range []net.IP{flow.Forward.SrcIP, flow.Forward.DstIP, flow.Reverse.SrcIP, flow.Reverse.DstIP} {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// addrFilter matches the conntrack entries with any of its addresses at
// either end, in either direction (an egress entry's reply goes to the
// proxy, its original comes from the sandbox).
type addrFilter map[netip.Addr]bool

// families are the address families of f's addresses (a pass dumps only
// their tables).
func (f addrFilter) families() []netlink.InetFamily {
	var v4, v6 bool
	for a := range f {
		v4, v6 = v4 || a.Is4(), v6 || a.Is6()
	}
	var out []netlink.InetFamily
	if v4 {
		out = append(out, nl.FAMILY_V4)
	}
	if v6 {
		out = append(out, nl.FAMILY_V6)
	}
	return out
}

func (f addrFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	for _, a := range flowAddrs(flow) {
		if f[a] {
			return true
		}
	}
	return false
}
