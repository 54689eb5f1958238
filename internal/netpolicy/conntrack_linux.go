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
// batch into one pass.
const ctDebounce = 500 * time.Millisecond

// ctSweeper holds the slots whose conntrack entries are still to delete.
type ctSweeper struct {
	mu      sync.Mutex
	pending map[int][]netip.Addr // slot → its host and sandbox addresses
	kick    chan struct{}        // one buffered wake-up for the sweeper
	pass    sync.Mutex           // one pass at a time
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
// starts and releases their slots, also when the deletion failed (the
// entries then age out): a slot is never lost to the pool.
func (s *ctSweeper) sweep() (deleted uint, err error) {
	s.pass.Lock()
	defer s.pass.Unlock()
	s.mu.Lock()
	batch := s.pending
	s.pending = map[int][]netip.Addr{}
	s.mu.Unlock()
	if len(batch) == 0 {
		return 0, nil
	}
	f := addrFilter{}
	for _, addrs := range batch {
		for _, a := range addrs {
			f[a] = true
		}
	}
	for _, family := range []netlink.InetFamily{nl.FAMILY_V4, nl.FAMILY_V6} {
		n, ferr := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family, f)
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
		n := m.netOf(id, slot)
		for _, a := range []netip.Addr{n.HostAddr, n.SandboxAddr, n.HostAddr6, n.SandboxAddr6} {
			f.live[a] = true
		}
	}
	m.mu.Unlock()
	var deleted uint
	var err error
	for _, family := range []netlink.InetFamily{nl.FAMILY_V4, nl.FAMILY_V6} {
		n, ferr := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family, f)
		deleted += n
		err = errors.Join(err, ferr)
	}
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

func (f addrFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	for _, a := range flowAddrs(flow) {
		if f[a] {
			return true
		}
	}
	return false
}
