// Package inject serves the egress proxy's intercepted HTTPS connections:
// those of a sandbox to a server name its network.rules set headers for.
// It completes the sandbox's TLS handshake with a leaf certificate for that
// name (package tlsca), reads HTTP/1.1 requests (ALPN offers http/1.1
// only), refuses any whose Host is not the name (421), sets the rule's
// headers with their ${e2b.secrets.NAME} placeholders filled from the
// team's secrets at request time, and forwards the request over Moat's own
// TLS connection, verified against the system roots and the operator's
// extra roots, to the connection's permitted original destination and no
// other. Keep-alive, chunked and streamed bodies both ways and protocol
// upgrades (101) pass through. Header values are never logged.
package inject
