// Package netpolicy gives each sandbox its own network: a named network
// namespace, a veth pair to the host, a /30 address pair (and a /126 IPv6
// pair when the host has IPv6), and nftables rules (package firewall)
// that let the host reach the sandbox while the sandbox reaches neither the
// host nor other sandboxes, and the internet only when allowed. The host's
// own networks, which no sandbox reaches, come from package hostnet.
//
// Every host object is named after the sandbox ID so that Recover can find
// leftovers after a crash:
//
//	netns       /run/netns/<netns prefix><id>       (default "moat-<id>"); New
//	            first makes /run/netns a shared mount point, as `ip netns
//	            add` does, so that a later `ip netns add` cannot hide the
//	            namespaces under a bind of its own (netnsdir_linux.go)
//	host veth   <if prefix><id[:12]>                (default "mh…"); peer "eth0" in the netns
//	addresses   one /30 of the subnet (default 10.200.0.0/16): .1 host, .2 sandbox;
//	            IPv6 (when the host has it): the same two addresses mapped
//	            into a ULA prefix (default DefaultULA fd6d:6f61:7400::/48,
//	            WithSubnet6) as its last 32 bits, a /126: 10.200.0.2 is
//	            fd6d:6f61:7400::ac8:2, its gateway fd6d:6f61:7400::ac8:1;
//	            no duplicate address detection, no router advertisements,
//	            and no link-local address on the host side
//	nftables    table inet <table> (default "moat") and table arp <table>,
//	            shared by all sandboxes: package firewall holds the
//	            ruleset and documents its sets, chains and counters
//
// Without IPv6 on the host, IPv6 is disabled on the host side of each veth
// and never forwarded. net.ipv4.ip_forward (and, with IPv6,
// net.ipv6.conf.all.forwarding) is switched on the first time a sandbox
// with internet access is set up and is never switched off again (other
// software on the host may rely on it); the forward chain keeps sandboxes
// that are not allowed from using it. A forwarding host ignores router
// advertisements on interfaces with accept_ra 1, so before switching IPv6
// forwarding on, every interface with accept_ra 1 that did not forward gets
// accept_ra 2 (logged): the host keeps its IPv6 default route.
package netpolicy
