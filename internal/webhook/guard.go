package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// guard decides which addresses deliveries may reach: public unicast
// addresses, plus the operator's allow list. It checks the address each
// connection dials (after name resolution), so a name that resolves to a
// refused address is refused too, whatever it resolved to before.
type guard struct {
	allow []netip.Prefix
	// local lists this host's own addresses (nil: the interfaces').
	local func() []netip.Addr
}

// notPublic are the special-purpose blocks (RFC 6890 and friends) that
// net/netip has no predicate for.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64 (reaches IPv4 of any kind)
	netip.MustParsePrefix("2001:db8::/32"),
}

// permitted reports whether a delivery may connect to a; why says why not.
func (g guard) permitted(a netip.Addr) (ok bool, why string) {
	a = a.Unmap()
	for _, p := range g.allow {
		if p.Contains(a) {
			return true, ""
		}
	}
	switch {
	case a.IsLoopback():
		return false, "a loopback address"
	case a.IsPrivate(), a.IsLinkLocalUnicast():
		return false, "a private or link-local address"
	case !a.IsGlobalUnicast():
		return false, "not a unicast address"
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false, "a special-purpose address"
		}
	}
	for _, l := range g.localAddrs() {
		if l.Unmap() == a {
			return false, "an address of this host"
		}
	}
	return true, ""
}

func (g guard) localAddrs() []netip.Addr {
	if g.local != nil {
		return g.local()
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// errRefused marks a connection the guard refused.
var errRefused = errors.New("webhook destination refused")

// control is the dialer's check of each address it connects to.
func (g guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errRefused, address, err)
	}
	if ok, why := g.permitted(ap.Addr()); !ok {
		return fmt.Errorf("%w: %s is %s (the server's --webhook-allow-cidr can allow it)", errRefused, ap.Addr(), why)
	}
	return nil
}

// client is the HTTP client of deliveries: through the guard, no proxy
// from the environment, no redirects (a 3xx answer is a failed delivery).
func (g guard) client(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: g.control}
	tr := &http.Transport{
		DialContext:         d.DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// checkURL refuses a URL deliveries could never reach.
func (g guard) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "webhook url %q: want an absolute http:// or https:// URL without credentials", raw)
	}
	host := strings.Trim(u.Hostname(), "[]")
	if a, err := netip.ParseAddr(host); err == nil {
		if ok, why := g.permitted(a); !ok {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "webhook url %q: %s is %s, which this server does not deliver to", raw, a, why)
		}
	} else if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		if ok, _ := g.permitted(netip.MustParseAddr("127.0.0.1")); !ok {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "webhook url %q: a loopback name, which this server does not deliver to", raw)
		}
	}
	return nil
}
