package firewall

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
)

// DescribeBinding says which inet tables' antispoof sets bind ifname to a
// (the binding Bind adds; without it the sandbox's packets are dropped as
// spoofed) and which tables' "allowed" sets hold ifname, looking at every
// inet table of the host (any scope). It is for the log of a connection to
// a sandbox that failed, not for decisions.
func DescribeBinding(ifname string, a netip.Addr) string {
	c, err := nftables.New()
	if err != nil {
		return fmt.Sprintf("nftables unreadable: %v", err)
	}
	defer c.CloseLasting()
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Sprintf("nftables tables unreadable: %v", err)
	}
	want := sandboxAddrKey(ifname, a)
	name := sandboxAddrsSet
	if a.Is6() {
		name = sandboxAddrs6Set
	}
	var bound, allowed []string
	for _, t := range tables {
		if hasElement(c, t, name, want) {
			bound = append(bound, t.Name)
		}
		if hasElement(c, t, allowedSet, ifnameKey(ifname)) {
			allowed = append(allowed, t.Name)
		}
	}
	return fmt.Sprintf("%s bound to %s in [%s], allowed out in [%s]", ifname, a,
		strings.Join(bound, " "), strings.Join(allowed, " "))
}

// hasElement reports whether table t's set name holds key.
func hasElement(c *nftables.Conn, t *nftables.Table, name string, key []byte) bool {
	s, err := c.GetSetByName(t, name)
	if err != nil {
		return false
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		return false
	}
	for _, e := range elems {
		if bytes.Equal(e.Key, key) {
			return true
		}
	}
	return false
}
