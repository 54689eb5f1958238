package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// lookups asks for name by every route to a resolver root has: the system
// resolver after rewriting /etc/resolv.conf to servers[0], then UDP and
// TCP queries straight to every server, every nameserver the original
// resolv.conf named, the default gateway and two public resolvers.
func lookups(name string, servers []string) map[string]string {
	res := map[string]string{}
	orig, _ := os.ReadFile("/etc/resolv.conf")
	targets := slices.Clone(servers)
	for _, line := range strings.Split(string(orig), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
			targets = append(targets, f[1])
		}
	}
	if _, gw, err := defaultLink(); err == nil {
		targets = append(targets, gw.String())
	}
	targets = append(targets, "1.1.1.1", "8.8.8.8")
	slices.Sort(targets)
	targets = slices.Compact(targets)

	if len(servers) > 0 {
		conf := "nameserver " + servers[0] + "\noptions timeout:1 attempts:1\n"
		if err := os.WriteFile("/etc/resolv.conf", []byte(conf), 0o644); err != nil {
			res["resolv.conf"] = "error: " + err.Error()
		} else {
			defer os.WriteFile("/etc/resolv.conf", orig, 0o644) //nolint:errcheck
			res["resolv.conf"] = systemLookup(name)
		}
	}
	for _, s := range targets {
		res["udp "+s] = query(s, name, false)
		res["tcp "+s] = query(s, name, true)
	}
	return res
}

func systemLookup(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	// The error names the name; the output must not carry it back.
	return strings.ReplaceAll(outcome(fmt.Sprint("answer ", addrs), err), name, "NAME")
}

// query sends one A query for name to server:53 and describes the answer.
func query(server, name string, tcp bool) string {
	q, err := buildQuery(name)
	if err != nil {
		return "error: " + err.Error()
	}
	network := "udp4"
	if tcp {
		network = "tcp4"
		q = append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)
	}
	c, err := net.DialTimeout(network, net.JoinHostPort(server, "53"), 2*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second)) //nolint:errcheck
	if _, err := c.Write(q); err != nil {
		return "error: " + err.Error()
	}
	resp, err := readAnswer(c, tcp)
	if err != nil {
		return "no reply: " + err.Error()
	}
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return "bad reply: " + err.Error()
	}
	p.SkipAllQuestions() //nolint:errcheck
	answers, _ := p.AllAnswers()
	return fmt.Sprintf("rcode=%d answers=%d", h.RCode, len(answers))
}

// readAnswer reads one DNS message from c (length-prefixed over TCP).
func readAnswer(c net.Conn, tcp bool) ([]byte, error) {
	if !tcp {
		b := make([]byte, 4096)
		n, err := c.Read(b)
		return b[:n], err
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}

func buildQuery(name string) ([]byte, error) {
	n, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: uint16(rand.Uint32()), RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: n, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		return nil, err
	}
	return b.Finish()
}
