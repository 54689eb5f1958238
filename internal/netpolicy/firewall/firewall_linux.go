package firewall

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/google/nftables"
)

// Config names a Firewall's objects and the addresses its rules know.
type Config struct {
	Table    string       // name of the inet and the arp table
	IfPrefix string       // prefix of every sandbox's host-side interface name (two characters)
	Subnet   netip.Prefix // IPv4 subnet the sandboxes' /30s are cut from
	Subnet6  netip.Prefix // IPv6 range of all the sandboxes (Subnet mapped into the ULA prefix)
	Redirect *Redirect    // where domain rules' traffic goes; nil: no dnat chain
}

// Redirect is where the host's domain-rule enforcement listens: the
// resolver on DNSPort (udp and tcp) and the transparent proxy on ProxyPort
// (tcp), on all of the host's addresses.
type Redirect struct {
	DNSPort, ProxyPort uint16
}

// Firewall owns the nftables tables of one scope. It is safe for
// concurrent use.
type Firewall struct {
	c Config

	mu        sync.Mutex     // serialises every transaction: table installs, hostnets refills and the per-sandbox sets' changes
	deny      []netip.Prefix // contents of the hostnets chain; guarded by mu
	denyDirty bool           // the last hostnets refill failed; guarded by mu
	st        *state         // the per-sandbox sets' members; nil: unknown, read at the next change; guarded by mu
	conns     chan *nftables.Conn
}

// New returns a Firewall whose hostnets chain will hold deny; it installs
// nothing (see Install).
func New(c Config, deny []netip.Prefix) *Firewall {
	return &Firewall{c: c, deny: deny, conns: make(chan *nftables.Conn, keptConns)}
}

// keptConns is how many netlink connections to nftables a Firewall keeps
// open between operations. Dialling one per operation (a socket, a bind
// and a seeded random source each time) was 1.6 % of the host's CPU in a
// burst of 100 sandbox creates, which make six operations each.
const keptConns = 4

// conn is a netlink connection to nftables for one operation: a kept one,
// else a new lasting one. Give it back with done.
func (f *Firewall) conn() (*nftables.Conn, error) {
	select {
	case c := <-f.conns:
		return c, nil
	default:
	}
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return c, nil
}

// done ends an operation on c: kept for the next one when it succeeded,
// closed when it failed (c may hold part of a batch or unread answers) or
// when enough are kept.
func (f *Firewall) done(c *nftables.Conn, err error) {
	if err == nil {
		select {
		case f.conns <- c:
			return
		default:
		}
	}
	_ = c.CloseLasting()
}

// Present reports whether both tables exist.
func (f *Firewall) Present() (_ bool, retErr error) {
	c, err := f.conn()
	if err != nil {
		return false, err
	}
	defer func() { f.done(c, retErr) }()
	_, err = c.ListTableOfFamily(f.c.Table, nftables.TableFamilyINet)
	if err == nil {
		_, err = c.ListTableOfFamily(f.c.Table, nftables.TableFamilyARP)
	}
	return err == nil, nil
}

// SetDeny replaces the hostnets chain's rules with drops of deny, in one
// transaction, when deny differs from its contents (or the last write
// failed); it reports whether it wrote. A table installed later carries
// deny too.
func (f *Firewall) SetDeny(deny []netip.Prefix) (_ bool, retErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.denyDirty && slices.Equal(deny, f.deny) {
		return false, nil
	}
	f.deny, f.denyDirty = deny, true // a missing table is reinstalled with f.deny
	c, err := f.conn()
	if err != nil {
		return false, err
	}
	defer func() { f.done(c, retErr) }()
	ch := &nftables.Chain{Name: HostnetsChain, Table: f.table()}
	c.FlushChain(ch)
	addHostnetsRules(c, f.table(), ch, deny)
	if err := c.Flush(); err != nil {
		return false, fmt.Errorf("nftables: refill chain %s: %w", HostnetsChain, err)
	}
	f.denyDirty = false
	return true, nil
}

// BoundAddrs returns the address bindings (see Bind) as ifname → addresses.
func (f *Firewall) BoundAddrs() (_ map[string][]netip.Addr, retErr error) {
	c, err := f.conn()
	if err != nil {
		return nil, err
	}
	defer func() { f.done(c, retErr) }()
	return f.readSandboxAddrs(c)
}

// UnbindStale removes the address bindings of every ifname of the scope
// (IfPrefix) for which live reports false.
func (f *Firewall) UnbindStale(live func(ifname string) bool) error {
	bound, err := f.BoundAddrs()
	if err != nil {
		return err
	}
	var errs []error
	for name := range bound {
		if !live(name) && strings.HasPrefix(name, f.c.IfPrefix) {
			errs = append(errs, f.Unbind(name))
		}
	}
	return errors.Join(errs...)
}
