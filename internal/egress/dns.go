package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Resolver answers the DNS queries of sandboxes with domain rules: for names
// on the sandbox's allow list a query of Moat's own making (the question
// alone) goes to Upstreams and the A records are remembered for the proxy;
// every other name gets NXDOMAIN without leaving the host, so DNS carries
// nothing out of a deny-all sandbox. Queries from addresses without rules
// are REFUSED.
type Resolver struct {
	Table     *Table
	Upstreams []netip.AddrPort
	Log       *slog.Logger
	Timeout   time.Duration // per upstream attempt; 0 means 3 s
}

const maxDNSMessage = 65535

// ServeUDP answers queries on pc until it is closed.
func (r *Resolver) ServeUDP(pc net.PacketConn) error {
	buf := make([]byte, maxDNSMessage)
	sem := make(chan struct{}, 256)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		ua, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}
		src, _ := netip.AddrFromSlice(ua.IP)
		q := append([]byte(nil), buf[:n]...)
		select {
		case sem <- struct{}{}:
		default:
			continue // overloaded: drop, the client retries
		}
		go func() {
			defer func() { <-sem }()
			if resp := r.Answer(context.Background(), src.Unmap(), q, false); resp != nil {
				pc.WriteTo(resp, from) //nolint:errcheck // best effort, as UDP is
			}
		}()
	}
}

// ServeTCP answers queries on l until it is closed.
func (r *Resolver) ServeTCP(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go r.serveConn(c)
	}
}

func (r *Resolver) serveConn(c net.Conn) {
	defer c.Close()
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return
	}
	src, _ := netip.AddrFromSlice(ta.IP)
	for i := 0; i < 16; i++ {
		c.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		resp := r.Answer(context.Background(), src.Unmap(), q, true)
		if resp == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

// Answer returns the response to query q from the sandbox at src (nil: no
// answer). tcp says whether the query came over TCP (an upstream answer
// too large for UDP is then fetched over TCP as well).
func (r *Resolver) Answer(ctx context.Context, src netip.Addr, q []byte, tcp bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 || h.OpCode != 0 {
		return reply(h, qs, dnsmessage.RCodeFormatError)
	}
	name := qs[0].Name.String()
	switch {
	case r.Table.lookup(src) == nil:
		return reply(h, qs, dnsmessage.RCodeRefused)
	case qs[0].Class != dnsmessage.ClassINET || !r.Table.Allowed(src, name):
		r.log().Debug("dns: name not allowed", "src", src, "name", name, "type", qs[0].Type)
		return reply(h, qs, dnsmessage.RCodeNameError)
	}
	fq, err := upstreamQuery(qs[0])
	if err != nil {
		return reply(h, qs, dnsmessage.RCodeFormatError)
	}
	resp, err := r.forward(ctx, fq, h.ID, tcp)
	if err != nil {
		r.log().Debug("dns: upstream failed", "name", name, "err", err)
		return reply(h, qs, dnsmessage.RCodeServerFailure)
	}
	addrs, ttl := answerAddrs(resp, qs[0])
	r.Table.remember(src, name, addrs, ttl)
	return resp
}

// upstreamQuery is the query sent upstream for an allowed question: built
// afresh from the question alone (name, type, class; recursion desired),
// never the sandbox's own bytes. Whatever else a sandbox puts in its query
// (extra answer, authority or additional records, EDNS options, header
// bits) would otherwise reach the upstream resolver verbatim: a channel out
// of a deny-all sandbox beside the allowed name.
func upstreamQuery(q dnsmessage.Question) ([]byte, error) {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	return b.Finish()
}

func (r *Resolver) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// forward sends q to the upstreams in turn (under a fresh ID) and returns
// the first matching answer with the client's ID restored.
func (r *Resolver) forward(ctx context.Context, q []byte, id uint16, tcp bool) ([]byte, error) {
	if len(r.Upstreams) == 0 {
		return nil, errors.New("no upstream resolvers")
	}
	to := r.Timeout
	if to == 0 {
		to = 3 * time.Second
	}
	var errs []error
	for _, up := range r.Upstreams {
		resp, err := exchange(ctx, up, q, tcp, to)
		if err == nil && !tcp && len(resp) > 2 && resp[2]&0x02 != 0 { // TC: retry over TCP
			resp, err = exchange(ctx, up, q, true, to)
		}
		if err == nil {
			binary.BigEndian.PutUint16(resp, id)
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", up, err))
	}
	return nil, errors.Join(errs...)
}

// exchange does one query/answer with up, checking the answer's ID and
// question against q's.
func exchange(ctx context.Context, up netip.AddrPort, q []byte, tcp bool, to time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	network := "udp"
	if tcp {
		network = "tcp"
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, up.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl) //nolint:errcheck
	msg := append([]byte(nil), q...)
	id := uint16(rand.Uint32())
	binary.BigEndian.PutUint16(msg, id)
	if tcp {
		msg = append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)
	}
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	if !tcp { // a lost datagram is asked again, as stub resolvers do
		c.SetReadDeadline(earliest(time.Now().Add(udpRetransmit), dl)) //nolint:errcheck
	}
	for {
		var resp []byte
		if tcp {
			var l [2]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return nil, err
			}
			resp = make([]byte, binary.BigEndian.Uint16(l[:]))
			if _, err := io.ReadFull(c, resp); err != nil {
				return nil, err
			}
		} else {
			buf := make([]byte, maxDNSMessage)
			n, err := c.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Now().Before(dl) {
				if _, err := c.Write(msg); err != nil {
					return nil, err
				}
				c.SetReadDeadline(earliest(time.Now().Add(udpRetransmit), dl)) //nolint:errcheck
				continue
			}
			if err != nil {
				return nil, err
			}
			resp = buf[:n]
		}
		if sameQuestion(resp, q, id) {
			return resp, nil
		}
		if tcp {
			return nil, errors.New("mismatched answer")
		}
	}
}

// udpRetransmit is how long a UDP query waits for its answer before it is
// sent again (within the attempt's timeout).
var udpRetransmit = time.Second

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sameQuestion reports whether resp answers q under id.
func sameQuestion(resp, q []byte, id uint16) bool {
	var pr, pq dnsmessage.Parser
	hr, err := pr.Start(resp)
	if err != nil || !hr.Response || hr.ID != id {
		return false
	}
	if _, err := pq.Start(q); err != nil {
		return false
	}
	a, err1 := pr.Question()
	b, err2 := pq.Question()
	return err1 == nil && err2 == nil && a.Type == b.Type && a.Class == b.Class &&
		equalFoldName(a.Name.String(), b.Name.String())
}

func equalFoldName(a, b string) bool {
	return len(a) == len(b) && (a == b || lower(a) == lower(b))
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

// answerAddrs returns the IPv4 and IPv6 addresses of the A and AAAA records
// in resp's answer section, following CNAMEs from q's name, and their
// smallest TTL.
func answerAddrs(resp []byte, q dnsmessage.Question) ([]netip.Addr, time.Duration) {
	var p dnsmessage.Parser
	if _, err := p.Start(resp); err != nil {
		return nil, 0
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, 0
	}
	names := map[string]bool{lower(q.Name.String()): true}
	var addrs []netip.Addr
	ttl := maxTTL
	rrs, err := p.AllAnswers()
	if err != nil {
		return nil, 0
	}
	// CNAME chains come in order; two passes cover out-of-order ones too.
	for pass := 0; pass < 2; pass++ {
		for _, rr := range rrs {
			if !names[lower(rr.Header.Name.String())] {
				continue
			}
			if c, ok := rr.Body.(*dnsmessage.CNAMEResource); ok {
				names[lower(c.CNAME.String())] = true
			}
		}
	}
	for _, rr := range rrs {
		if !names[lower(rr.Header.Name.String())] {
			continue
		}
		var a netip.Addr
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			a = netip.AddrFrom4(b.A)
		case *dnsmessage.AAAAResource:
			a = netip.AddrFrom16(b.AAAA)
		default:
			continue
		}
		addrs = append(addrs, a)
		ttl = min(ttl, time.Duration(rr.Header.TTL)*time.Second)
	}
	return addrs, ttl
}

// reply is an empty answer to h's question with rcode.
func reply(h dnsmessage.Header, qs []dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: rcode}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	if len(qs) == 1 {
		if err := b.Question(qs[0]); err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
