// Package netpolicy gives each sandbox its own network: a named network
// namespace, a veth pair to the host, a /30 address pair, and nftables rules
// that let the host reach the sandbox while the sandbox reaches neither the
// host nor other sandboxes, and the internet only when allowed.
//
// Every host object is named after the sandbox ID so that Recover can find
// leftovers after a crash:
//
//	netns       /run/netns/<netns prefix><id>       (default "moat-<id>")
//	host veth   <if prefix><id[:12]>                (default "mh…"); peer "eth0" in the netns
//	addresses   one /30 of the subnet (default 10.200.0.0/16): .1 host, .2 sandbox
//	nftables    table inet <table> (default "moat"), shared by all sandboxes;
//	            set "allowed" holds the host-side ifnames with internet access
//
// The table's policy, for traffic from the sandboxes' host-side interfaces:
//
//	input:       established/related accepted, everything else dropped, so a
//	             sandbox cannot open a connection to any host address
//	             (127.0.0.1, its own gateway, other veths, the host's LAN IP)
//	forward:     sandbox→sandbox dropped; replies into sandboxes accepted;
//	             sandbox→private, loopback, link-local (cloud metadata) and
//	             multicast IPv4 ranges dropped; sandbox→elsewhere accepted only
//	             for ifnames in "allowed"; all else from a sandbox dropped
//	postrouting: traffic from the subnet leaving through a non-sandbox
//	             interface is masqueraded
//
// IPv6 is disabled on the host side of each veth and never forwarded.
// net.ipv4.ip_forward is switched on the first time a sandbox with internet
// access is set up and is never switched off again (other software on the host
// may rely on it); the forward chain keeps sandboxes that are not allowed from
// using it.
package netpolicy
