package firewall

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// Per-sandbox egress rules (allowOut, denyOut) live in interval sets of the inet
// table keyed by (host ifname . IPv4 range): egressAllowSet and
// egressDenySet, and by (host ifname . IPv6 range): egressAllow6Set and
// egressDeny6Set. A sandbox's update is one nftables transaction that
// removes the ranges it no longer has and adds the new ones, so a packet
// sees the old policy or the new one, never a mix, and a connection whose
// destination stays allowed is never interrupted. Install keeps their
// elements like those of the other sets.
const (
	egressAllowSet  = "egress_allow"
	egressDenySet   = "egress_deny"
	egressAllow6Set = "egress_allow6"
	egressDeny6Set  = "egress_deny6"
)

var (
	egressKeyType  = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)
	egressKey6Type = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIP6Addr)
	egressSetNames = []string{egressAllowSet, egressDenySet, egressAllow6Set, egressDeny6Set}
)

// egressSets are the four sets in one table.
type egressSets struct{ allow, deny, allow6, deny6 *nftables.Set }

// addrLen is the address length of set name's keys.
func addrLen(name string) int {
	if name == egressAllow6Set || name == egressDeny6Set {
		return 16
	}
	return 4
}

func egressSetIn(t *nftables.Table, name string) *nftables.Set {
	kt := egressKeyType
	if addrLen(name) == 16 {
		kt = egressKey6Type
	}
	return &nftables.Set{Table: t, Name: name, KeyType: kt, Concatenation: true, Interval: true}
}

// addEgressSets adds the four sets, holding keep[name], to c's batch.
func addEgressSets(c *nftables.Conn, t *nftables.Table, keep map[string][]nftables.SetElement) (egressSets, error) {
	e := egressSets{egressSetIn(t, egressAllowSet), egressSetIn(t, egressDenySet), egressSetIn(t, egressAllow6Set), egressSetIn(t, egressDeny6Set)}
	for _, s := range []*nftables.Set{e.allow, e.deny, e.allow6, e.deny6} {
		if err := c.AddSet(s, keep[s.Name]); err != nil {
			return egressSets{}, fmt.Errorf("nftables: add set %s: %w", s.Name, err)
		}
	}
	return e, nil
}

// inEgress matches when (input ifname . IPv4 destination) is in set.
func inEgress(set *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Payload{DestRegister: 2, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
	}
}

// inEgress6 matches when (input ifname . IPv6 destination) is in set.
func inEgress6(set *nftables.Set) []expr.Any { return inSet6(expr.MetaKeyIIFNAME, 24, set, false) }

func egressElem(ifname string, r addrRange) nftables.SetElement {
	return nftables.SetElement{Key: sandboxAddrKey(ifname, r.from), KeyEnd: sandboxAddrKey(ifname, r.to)}
}

func elemKey(e nftables.SetElement) string { return string(e.Key) + "\x00" + string(e.KeyEnd) }

// readEgress returns the elements of set name grouped by ifname; a missing
// table or set yields none.
func (f *Firewall) readEgress(c *nftables.Conn, name string) (map[string][]nftables.SetElement, error) {
	out := map[string][]nftables.SetElement{}
	s, err := c.GetSetByName(f.table(), name)
	if err != nil {
		return out, nil
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("nftables: read set %s: %w", name, err)
	}
	n := len(ifnameKey(""))
	for _, e := range elems {
		if len(e.Key) != n+addrLen(name) {
			continue
		}
		ifname := string(trimNUL(e.Key[:n]))
		out[ifname] = append(out[ifname], nftables.SetElement{Key: e.Key, KeyEnd: e.KeyEnd})
	}
	return out, nil
}

// keepEgress reads both sets' elements for a table reinstall.
func (f *Firewall) keepEgress(c *nftables.Conn) (map[string][]nftables.SetElement, error) {
	keep := map[string][]nftables.SetElement{}
	if _, err := c.ListTableOfFamily(f.c.Table, nftables.TableFamilyINet); err != nil {
		return keep, nil
	}
	for _, name := range egressSetNames {
		byIf, err := f.readEgress(c, name)
		if err != nil {
			return nil, err
		}
		for _, es := range byIf {
			keep[name] = append(keep[name], es...)
		}
	}
	return keep, nil
}

// WriteEgress replaces ifname's elements of the egress sets with the ranges
// of allow and deny (none: removes them all; a deny holding 0.0.0.0/0
// denies all IPv6 too) and sets its membership of the "allowed" set
// (internet) and the "proxied" set, in one transaction: a packet sees the
// old policy or the new one.
func (f *Firewall) WriteEgress(ifname string, allow, deny []netip.Prefix, internet, proxied bool) error {
	return f.writeEgress(ifname, egressWant(allow, deny), internet, proxied)
}

// AllowsAny reports whether allow opens any destination (an IPv4 or IPv6
// prefix): WriteEgress then gives it elements in the allow sets.
func AllowsAny(allow []netip.Prefix) bool { return len(mergeV4(allow))+len(mergeV6(allow)) > 0 }

// writeEgress replaces ifname's elements of the egress sets with want
// (set name → ranges; nil: removes them all) and sets its membership of the
// "allowed" and "proxied" sets, in one transaction.
func (f *Firewall) writeEgress(ifname string, want map[string][]addrRange, internet, proxied bool) error {
	return f.change("egress policy of "+ifname, func(c *nftables.Conn, st *state) (func(), error) {
		var commits []func()
		err := f.planEgress(c, st, ifname, want, proxied, &commits)
		if err == nil {
			err = planMember(c, st.allowed, f.allowedSet(), ifname, internet, &commits)
		}
		return all(commits), err
	})
}

// planEgress adds to c's batch what turns ifname's elements of the egress
// sets into want and its membership of "proxied" into proxied.
func (f *Firewall) planEgress(c *nftables.Conn, st *state, ifname string, want map[string][]addrRange, proxied bool, commits *[]func()) error {
	if err := planMember(c, st.proxied, proxiedSetIn(f.table()), ifname, proxied, commits); err != nil {
		return err
	}
	for _, name := range egressSetNames {
		if err := f.replaceEgress(c, st, ifname, name, want[name], commits); err != nil {
			return err
		}
	}
	return nil
}

// all is one commit running commits in order, nil for none.
func all(commits []func()) func() {
	if len(commits) == 0 {
		return nil
	}
	return func() {
		for _, c := range commits {
			c()
		}
	}
}

// planMember adds to c's batch what makes ifname a member of name set s
// (on) or not, as members (the state's record of s) says it is not yet;
// the record's update is appended to commits.
func planMember(c *nftables.Conn, members map[string]bool, s *nftables.Set, ifname string, on bool, commits *[]func()) error {
	if members[ifname] == on {
		return nil
	}
	elems := []nftables.SetElement{{Key: ifnameKey(ifname)}}
	var err error
	if on {
		err = c.SetAddElements(s, elems)
	} else {
		err = c.SetDeleteElements(s, elems)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	*commits = append(*commits, func() { setMember(members, ifname, on) })
	return nil
}

// replaceEgress adds to c's batch what turns ifname's elements of set name
// (as st has them) into want; the state's update is appended to commits
// when it added anything.
func (f *Firewall) replaceEgress(c *nftables.Conn, st *state, ifname, name string, want []addrRange, commits *[]func()) error {
	have := st.egress[name][ifname]
	old := map[string]bool{}
	for _, e := range have {
		old[elemKey(e)] = true
	}
	var add, del, next []nftables.SetElement
	keep := map[string]bool{}
	for _, r := range want {
		e := egressElem(ifname, r)
		if keep[elemKey(e)] {
			continue
		}
		keep[elemKey(e)] = true
		next = append(next, e)
		if !old[elemKey(e)] {
			add = append(add, e)
		}
	}
	for _, e := range have {
		if !keep[elemKey(e)] {
			del = append(del, e)
		}
	}
	if len(add)+len(del) == 0 {
		return nil
	}
	s := egressSetIn(f.table(), name)
	if len(del) > 0 {
		if err := c.SetDeleteElements(s, del); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if len(add) > 0 {
		if err := c.SetAddElements(s, add); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	*commits = append(*commits, func() {
		if len(next) == 0 {
			delete(st.egress[name], ifname)
		} else {
			st.egress[name][ifname] = next
		}
	})
	return nil
}

// ClearEgress removes ifname's elements from the egress sets and from the
// "proxied" set.
func (f *Firewall) ClearEgress(ifname string) error {
	return f.change("clear egress policy of "+ifname, func(c *nftables.Conn, st *state) (func(), error) {
		var commits []func()
		err := f.planEgress(c, st, ifname, nil, false, &commits)
		return all(commits), err
	})
}

// ClearStaleEgress removes the egress elements of every ifname of the
// scope (IfPrefix) for which live reports false.
func (f *Firewall) ClearStaleEgress(live func(ifname string) bool) (retErr error) {
	c, err := f.conn()
	if err != nil {
		return err
	}
	defer func() { f.done(c, retErr) }()
	stale := map[string]bool{}
	for _, name := range egressSetNames {
		have, err := f.readEgress(c, name)
		if err != nil {
			return err
		}
		for ifname := range have {
			if !live(ifname) && strings.HasPrefix(ifname, f.c.IfPrefix) {
				stale[ifname] = true
			}
		}
	}
	var errs []error
	for ifname := range stale {
		errs = append(errs, f.ClearEgress(ifname))
	}
	return errors.Join(errs...)
}

// EgressRanges returns the ranges (IPv4 first, then IPv6) enforced for
// ifname now, as first and last addresses (for tests and diagnostics).
func (f *Firewall) EgressRanges(ifname string) (allow, deny [][2]netip.Addr, retErr error) {
	c, err := f.conn()
	if err != nil {
		return nil, nil, err
	}
	defer func() { f.done(c, retErr) }()
	n := len(ifnameKey(""))
	for _, l := range []struct {
		name string
		out  *[][2]netip.Addr
	}{{egressAllowSet, &allow}, {egressDenySet, &deny}, {egressAllow6Set, &allow}, {egressDeny6Set, &deny}} {
		have, err := f.readEgress(c, l.name)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range have[ifname] {
			a, _ := netip.AddrFromSlice(e.Key[n:])
			b, _ := netip.AddrFromSlice(e.KeyEnd[n:])
			*l.out = append(*l.out, [2]netip.Addr{a, b})
		}
	}
	return allow, deny, nil
}

// egressWant maps allow and deny to the ranges of each egress set, by
// family; a denyOut holding 0.0.0.0/0 denies all IPv6 too (withDenyAllV6),
// so "deny all but allowOut" means both families, and an allowOut opens
// exactly the IPv6 prefixes it names.
func egressWant(allow, deny []netip.Prefix) map[string][]addrRange {
	deny = withDenyAllV6(deny)
	return map[string][]addrRange{
		egressAllowSet: v4Ranges(mergeV4(allow)), egressDenySet: v4Ranges(mergeV4(deny)),
		egressAllow6Set: mergeV6(allow), egressDeny6Set: mergeV6(deny),
	}
}
