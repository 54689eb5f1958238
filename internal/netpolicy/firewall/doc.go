// Package firewall holds the nftables ruleset that confines Moat's
// sandboxes on the host: the tables, chains and sets, and the transactions
// that admit, bind, police and forget one sandbox's host-side interface.
// Package netpolicy creates the interfaces and addresses and drives a
// Firewall; the ruleset lives apart so that it can be read as one policy.
//
// Objects (one scope: Config):
//
//	nftables    table inet <table> (default "moat") and table arp <table>,
//	            shared by all sandboxes; set "allowed" holds the host-side
//	            ifnames with internet access, set "sandbox_addrs" (in both
//	            tables) maps each host-side ifname to its sandbox's address,
//	            "sandbox_addrs6" to its IPv6 address; interval sets
//	            "egress_allow" and "egress_deny" hold each sandbox's egress
//	            policy (E2B's allowOut/denyOut) as (ifname . IPv4
//	            range) elements, "egress_allow6" and "egress_deny6" as
//	            (ifname . IPv6 range) elements
//
// The table's policy, for traffic from the sandboxes' host-side interfaces:
//
//	antispoof:   (prerouting, raw priority: before conntrack and routing)
//	             IPv4 whose (ifname . source) is not in "sandbox_addrs" is
//	             dropped and counted in counter "spoofed_ipv4"; IPv6 passes
//	             only from the address in "sandbox_addrs6" (a neighbour
//	             advertisement only for that address as its target) or, for
//	             a neighbour solicitation (hop limit 255), from a link-local
//	             address; MLD reports are dropped uncounted; the rest is
//	             dropped and counted in "spoofed_ipv6"
//	arp input:   (table arp) ARP that is not Ethernet/IPv4 or whose
//	             (ifname . sender IP) is not in "sandbox_addrs" is dropped
//	             and counted in "spoofed_arp": a sandbox cannot plant host
//	             neighbour entries for other addresses
//	input:       established/related accepted, and neighbour solicitations
//	             and advertisements (hop limit 255); everything else
//	             dropped, so a sandbox cannot open a connection to any host
//	             address (127.0.0.1, its own gateway, other veths, the
//	             host's LAN IP, IPv4 or IPv6)
//	forward:     sandbox→sandbox dropped; toward a sandbox, nothing but its
//	             own address (per "sandbox_addrs" and "sandbox_addrs6"), and
//	             only replies; sandbox→private, loopback, link-local (cloud
//	             metadata) and multicast IPv4 ranges and their IPv6
//	             counterparts (blockedV6: ::/96, IPv4-mapped, NAT64, Teredo,
//	             6to4, ULA fc00::/7, site- and link-local, multicast) and
//	             the scope's own IPv6 range dropped; then chain "hostnets";
//	             then (ifname . destination) in "egress_allow"/"egress_allow6"
//	             accepted, in "egress_deny"/"egress_deny6" dropped (so
//	             allowOut wins over denyOut and neither reopens what is
//	             blocked above; a denyOut holding 0.0.0.0/0 also holds
//	             ::/0); IPv6 from "proxied" members refused (ICMPv6
//	             administratively prohibited; their DNS even to an allowed
//	             address); sandbox→elsewhere accepted only for ifnames in
//	             "allowed"; all else from a sandbox dropped
//	hostnets:    (regular chain) drops, IPv4 and IPv6, every network the host
//	             is directly connected to (the prefix of each address on a
//	             non-sandbox interface), every gateway of its routes (all
//	             tables, multipath and via next hops) and the operator's
//	             extra prefixes; so only what the host routes past its
//	             gateways leaves. netpolicy computes it (package hostnet)
//	             and recomputes it after address and route changes; SetDeny
//	             replaces its rules in one transaction (flush + refill);
//	             table reinstalls carry the current list
//	postrouting: traffic from the subnet (and its IPv6 range: NAT66)
//	             leaving through a non-sandbox interface is masqueraded
//	dnat:        (prerouting, dstnat priority; only with Config.Redirect)
//	             for ifnames in set "proxied" (sandboxes with allowOut
//	             domains): udp/tcp 53 to any address is redirected to the
//	             host's resolver, tcp 80/443 to addresses outside
//	             "egress_allow" to the host's transparent proxy (package
//	             egress); the input chain accepts those two ports from
//	             "proxied" members only, and drops them from every other
//	             non-loopback interface. Redirected packets never reach
//	             forward: the proxy refuses Blocked destinations itself
//
// Counters: nft list counters table inet <table>; nft list counters table
// arp <table>. WriteEgress replaces one sandbox's policy elements and its
// "allowed" and "proxied" memberships in one transaction (old or new, never a mix; rules
// are stateless, so a connection whose destination stays allowed goes on).
// A veth's binding (Bind) is added when netpolicy sets a sandbox up (before
// which its packets are all dropped: fail closed), removed (Unbind) when it
// tears it down, and rebuilt when it recovers after a restart. Each change
// is computed from the Firewall's record of the per-sandbox sets (state),
// not from a read of the whole sets: a create and a kill cost the same
// with a thousand sandboxes as with one.
package firewall
