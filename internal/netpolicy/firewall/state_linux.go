package firewall

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// state is what the scope's per-sandbox sets hold for each host-side
// ifname, as this Firewall last committed or read it. A write computes its
// change from it instead of reading whole sets back from the kernel: each
// such read is a dump of every sandbox's elements, so a create cost
// O(sandboxes) — ~1 ms per create at a hundred sandboxes, ten times that at
// a thousand. Only this Firewall writes its ifnames' elements (ifnames are
// per sandbox and a scope has one server), so the state stays exact for
// them; another process's writes to other ifnames do not matter to it.
//
// It is loaded from the kernel when unknown: at the first write, after a
// table install and after any transaction that failed (whose outcome is not
// known). A failed transaction planned from a state that was not freshly
// read is planned again once from a fresh read, so a set changed behind the
// Firewall's back (an operator's nft command) costs a retry, not an error.
type state struct {
	egress  map[string]map[string][]nftables.SetElement // set name → ifname → elements
	allowed map[string]bool                             // members of "allowed"
	proxied map[string]bool                             // members of "proxied"
	addrs   map[string][]netip.Addr                     // ifname → bound addresses (sandbox_addrs, sandbox_addrs6)
}

// readState reads the sets' members from the kernel; a missing table or
// set reads as empty.
func (f *Firewall) readState(c *nftables.Conn) (*state, error) {
	st := &state{egress: map[string]map[string][]nftables.SetElement{}}
	for _, name := range egressSetNames {
		byIf, err := f.readEgress(c, name)
		if err != nil {
			return nil, err
		}
		st.egress[name] = byIf
	}
	var err error
	if st.allowed, err = f.readNames(c, allowedSet); err != nil {
		return nil, err
	}
	if st.proxied, err = f.readNames(c, proxiedSet); err != nil {
		return nil, err
	}
	if st.addrs, err = f.readSandboxAddrs(c); err != nil {
		return nil, err
	}
	return st, nil
}

// readNames returns the members of an ifname set of the inet table (none
// when the table or set is missing).
func (f *Firewall) readNames(c *nftables.Conn, name string) (map[string]bool, error) {
	elems, err := keepElements(c, f.table(), name)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range elems {
		out[unix.ByteSliceToString(e.Key)] = true
	}
	return out, nil
}

// change runs one transaction under mu. plan adds to c's batch what it
// wants, given st, and returns what to record in st once the batch is
// committed; a nil commit means it added nothing and nothing is sent. A
// failure forgets the state (see state for the retry).
func (f *Firewall) change(what string, plan func(c *nftables.Conn, st *state) (commit func(), err error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for attempt := 0; ; attempt++ {
		fresh := f.st == nil
		err := f.changeOnce(plan)
		if err == nil {
			return nil
		}
		f.st = nil
		if fresh || attempt > 0 {
			return fmt.Errorf("nftables: %s: %w", what, err)
		}
	}
}

// changeOnce is one attempt of change; mu must be held.
func (f *Firewall) changeOnce(plan func(c *nftables.Conn, st *state) (func(), error)) (retErr error) {
	c, err := f.conn()
	if err != nil {
		return err
	}
	defer func() { f.done(c, retErr) }()
	if f.st == nil {
		if f.st, err = f.readState(c); err != nil {
			return err
		}
	}
	commit, err := plan(c, f.st)
	if err != nil || commit == nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return err
	}
	commit()
	return nil
}

// setMember records ifname's membership of a name set.
func setMember(m map[string]bool, ifname string, on bool) {
	if on {
		m[ifname] = true
	} else {
		delete(m, ifname)
	}
}

// withAddr returns addrs with a added once.
func withAddr(addrs []netip.Addr, a netip.Addr) []netip.Addr {
	if slices.Contains(addrs, a) {
		return addrs
	}
	return append(addrs, a)
}
