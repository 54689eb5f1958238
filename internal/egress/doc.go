// Package egress enforces domain allow lists (E2B's allowOut domain entries)
// for sandboxes whose IP policy denies everything else: a DNS resolver that
// answers only allowed names, and a transparent TCP proxy for ports 80 and
// 443 that lets a connection through only when its TLS SNI or HTTP Host
// names an allowed domain and its original destination is an address that
// name resolved to through the resolver.
//
// The host's firewall (package netpolicy) redirects such a sandbox's DNS
// (udp/tcp 53, to any server) and its new TCP connections to ports 80 and
// 443 (except to addresses its allowOut lists) to the two listeners; the
// listeners find the sandbox's policy by the connection's source address,
// which netpolicy's antispoof rules guarantee. Sandboxes without domain
// rules never reach them.
//
// Table holds every sandbox's policy; Set replaces one sandbox's policy at
// once (a single map swap under a lock), so a connection is judged by the
// old list or the new one, never a mix. Connections already spliced stay up.
package egress
