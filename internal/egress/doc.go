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
//
// A sandbox's policy may also carry header rules (E2B's network.rules):
// its HTTPS connections to allowed names that a rule matches are not
// spliced but handed to package inject, which terminates their TLS with a
// certificate of the egress CA (package tlsca), sets the rule's headers
// with the team's secrets and forwards each request over Moat's own
// verified TLS to the same permitted destination. Plain HTTP to such a name
// is answered 403. Every other connection is spliced as before.
package egress
