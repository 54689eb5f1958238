// Command netprobe tries, as root inside a Moat sandbox, to get past the
// sandbox's egress policy, and prints what it saw as one JSON object of
// step → outcome. The e2e suites (netpolicy.test.mjs) build it with
// `go build` (CGO_ENABLED=0), upload it into a sandbox and judge by what
// reached the simulated internet and the host's interfaces, not by this
// output: a probe that "fails" here may still have leaked a packet.
//
// Tags and names arrive hex-encoded, so that the command line (which
// crosses the host's loopback on its way to envd) never carries the bytes
// the host's sniffers look for.
//
//	netprobe takeover ADDR          delete every nftables table in this netns, replace the
//	                                routes with a default route via the gateway on our own
//	                                interface, add ADDR/32 to it
//	netprobe send HEXTAG TCPPORT UDPPORT HOST…
//	                                per HOST: TCP connect to TCPPORT (then the tag), UDP with the
//	                                tag, raw ICMP echo, raw TCP SYN, raw IP protocol 253, and a
//	                                UDP datagram with a forged source (IP_HDRINCL), all tagged
//	netprobe dns HEXNAME SERVER…    point /etc/resolv.conf at the first SERVER and look NAME up
//	                                through it, then send an A query for NAME over UDP and TCP
//	                                to every SERVER, every nameserver the original resolv.conf
//	                                named, the default gateway, 1.1.1.1 and 8.8.8.8
//	netprobe ask HEXNAME SERVER…    only the UDP and TCP queries to each SERVER
package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: netprobe takeover ADDR | send HEXTAG TCPPORT UDPPORT HOST... | dns|ask HEXNAME SERVER...")
		os.Exit(2)
	}
	var res map[string]string
	switch os.Args[1] {
	case "takeover":
		res = takeover(os.Args[2])
	case "send":
		if len(os.Args) < 6 {
			fail("send needs HEXTAG TCPPORT UDPPORT HOST...")
		}
		res = send(unhex(os.Args[2]), os.Args[3:5], os.Args[5:])
	case "dns":
		res = lookups(unhex(os.Args[2]), os.Args[3:])
	case "ask":
		res = map[string]string{}
		for _, srv := range os.Args[3:] {
			res["udp "+srv] = query(srv, unhex(os.Args[2]), false)
			res["tcp "+srv] = query(srv, unhex(os.Args[2]), true)
		}
	default:
		fail("unknown command " + os.Args[1])
	}
	json.NewEncoder(os.Stdout).Encode(res) //nolint:errcheck
}

func unhex(s string) string {
	b, err := hex.DecodeString(s)
	if err != nil {
		fail("not hex: " + s)
	}
	return string(b)
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "netprobe:", msg)
	os.Exit(2)
}

// outcome renders an error as the step's result.
func outcome(ok string, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ok
}
