package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/egress/inject"
)

// Proxy is the transparent proxy for redirected TCP connections to ports
// 80 and 443. For each connection it reads the first TLS record (port 443)
// or the HTTP request head (port 80), takes the server name from the SNI or
// the Host header, and splices the connection to its original destination
// only if Table.Permit agrees (the name is allowed and resolved to that
// address through the Resolver) and Blocked does not refuse the address.
// Anything else is closed without a byte sent.
//
// A permitted connection to a name with header rules (Table.SetPolicy) is
// not spliced: on port 443 it goes to Inject, which terminates its TLS and
// forwards its requests with the headers set; on port 80 it is answered
// 403 (a rule's header, often a secret, never travels in clear, and a
// request is never forwarded without it).
type Proxy struct {
	Table *Table
	// OriginalDst returns the destination the client dialled before the
	// redirect (SO_ORIGINAL_DST on Linux).
	OriginalDst func(c net.Conn) (netip.AddrPort, error)
	// Blocked reports destinations never reached whatever the name (the
	// host's networks, private and link-local ranges).
	Blocked func(netip.Addr) bool
	Log     *slog.Logger
	// Dial connects to the original destination; nil means a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Inject serves intercepted connections; nil refuses (closes) every
	// connection that header rules would intercept.
	Inject *inject.Server
}

// handshakeTimeout bounds the wait for a client's first bytes, and
// maxPending the connections waiting for them (beyond it new ones are
// closed at once), so a sandbox cannot pin the host's memory with
// connections that never speak.
const (
	handshakeTimeout = 10 * time.Second
	maxPending       = 1024
)

// Serve accepts connections on l until it is closed.
func (p *Proxy) Serve(l net.Listener) error {
	pending := make(chan struct{}, maxPending)
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		select {
		case pending <- struct{}{}:
			go p.handle(c, func() { <-pending })
		default:
			c.Close()
		}
	}
}

func (p *Proxy) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}

// handle judges c and splices it; decided is called once c is judged.
func (p *Proxy) handle(c net.Conn, decided func()) {
	defer c.Close()
	src, dst, name, first, err := p.decide(c)
	decided()
	if err != nil {
		p.log().Debug("egress proxy: connection refused", "src", src, "dst", dst, "name", name, "reason", err)
		return
	}
	if p.Table.injects(src, name) {
		p.intercept(c, src, dst, name, first)
		return
	}
	dial := p.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	up, err := dial(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		p.log().Debug("egress proxy: dial", "dst", dst, "name", name, "err", err)
		return
	}
	defer up.Close()
	// Registered atomically with a last check: a Set that removes the name
	// after this point closes c.
	drop, ok := p.Table.admit(src, name, dst.Addr(), c)
	if !ok {
		p.log().Debug("egress proxy: policy changed while dialling", "src", src, "name", name)
		return
	}
	defer drop()
	if _, err := up.Write(first); err != nil {
		return
	}
	splice(c, up)
}

// intercept hands a connection to a name with header rules to Inject
// (HTTPS), or refuses it with 403 (HTTP).
func (p *Proxy) intercept(c net.Conn, src netip.Addr, dst netip.AddrPort, name string, first []byte) {
	if dst.Port() != 443 {
		p.log().Debug("egress proxy: plain HTTP to a name with header rules refused", "src", src, "name", name)
		refusePlainHTTP(c, name)
		return
	}
	if p.Inject == nil {
		p.log().Warn("egress proxy: header rules without an interceptor; connection refused", "src", src, "name", name)
		return
	}
	drop, ok := p.Table.admit(src, name, dst.Addr(), c)
	if !ok {
		return
	}
	defer drop()
	p.Inject.Serve(c, first, inject.Conn{Name: name, Dst: dst,
		Policy: func() (string, map[string]string, bool) { return p.Table.policyFor(src, name) }})
}

// refusePlainHTTP answers a plain HTTP request head (already read) with
// 403 and a text saying why.
func refusePlainHTTP(c net.Conn, name string) {
	body := "moat: " + name + " has network.rules that set request headers; they apply to HTTPS only, " +
		"so plain HTTP to it is refused (use https://" + name + "/)\n"
	c.SetWriteDeadline(time.Now().Add(handshakeTimeout)) //nolint:errcheck
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"+
		"Connection: close\r\n\r\n%s", len(body), body)
	// Read what else the client sent for a moment, so that closing with
	// unread bytes does not reset the connection before the answer is read.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()                                //nolint:errcheck
		c.SetReadDeadline(time.Now().Add(time.Second)) //nolint:errcheck
		io.Copy(io.Discard, io.LimitReader(c, 64<<10)) //nolint:errcheck
	}
}

// decide reads the client's first bytes and judges the connection. It
// returns them for replay to the destination.
func (p *Proxy) decide(c net.Conn) (src netip.Addr, dst netip.AddrPort, name string, first []byte, err error) {
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return src, dst, "", nil, errors.New("not TCP")
	}
	src, _ = netip.AddrFromSlice(ra.IP)
	src = src.Unmap()
	if p.Table.lookup(src) == nil {
		return src, dst, "", nil, errors.New("source has no domain rules")
	}
	dst, err = p.OriginalDst(c)
	if err != nil {
		return src, dst, "", nil, err
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if p.Blocked != nil && p.Blocked(dst.Addr()) {
		return src, dst, "", nil, errors.New("destination is blocked")
	}
	c.SetReadDeadline(time.Now().Add(handshakeTimeout)) //nolint:errcheck
	switch dst.Port() {
	case 443:
		first, name, err = readClientHello(c)
	case 80:
		first, name, err = readHead(c)
	default:
		return src, dst, "", nil, errors.New("port not proxied")
	}
	if err != nil {
		return src, dst, name, nil, err
	}
	c.SetReadDeadline(time.Time{}) //nolint:errcheck
	if !p.Table.Permit(src, name, dst.Addr()) {
		if p.Table.Allowed(src, name) {
			return src, dst, name, nil, errors.New("destination is not an address the name resolved to")
		}
		return src, dst, name, nil, errors.New("name not allowed")
	}
	return src, dst, name, first, nil
}

// splice copies both ways until both directions end, passing half-closes on.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			a.Close() // reset or closed by Set: end both ways at once
			b.Close()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite() //nolint:errcheck
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}
