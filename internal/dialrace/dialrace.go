// Package dialrace connects to sandboxes with a second attempt racing a
// first that stalls. A connect from the host to a sandbox once never
// completed although the sandbox answered its SYNs: another scope's stale
// nftables table dropped the SYN-ACKs to its old proxy port, which the
// host had picked as the connect's source port (docs/benchmarks.md, "a
// lost sandbox"; fixed in the firewall). Another four-tuple gets through
// whatever stalls one, so every host-side client of a sandbox's envd dials
// through it.
package dialrace

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Stall is how long a connect to a sandbox may go unanswered before a
// second one races it. On a veth a connect completes in well under a
// millisecond, or is refused at once.
const Stall = time.Second

// stalls counts the process's stalled connects (Stalls).
var stalls atomic.Uint64

// Stalls is how many connects of this process have stalled and been raced
// since it started, by every caller: with the firewall's port guard fixed
// none should (moat_sandbox_connect_stalls_total, moat bench --density).
func Stalls() uint64 { return stalls.Load() }

// DialContext is d.DialContext with a second attempt racing one that has
// stalled for Stall; onStall (may be nil) hears of each such stall with the
// address. For an http.Transport.
func DialContext(d *net.Dialer, onStall func(addr string)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		dial := func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, network, addr) }
		var stalled func()
		if onStall != nil {
			stalled = func() { onStall(addr) }
		}
		return Dial(ctx, dial, Stall, stalled)
	}
}

// Dial connects with dial; when the first attempt has neither connected
// nor failed after stall, onStall is called and a second attempt (a new
// socket, so a new source port) races it, and the first to connect wins.
// A refusal or other error of the first attempt before the stall is
// returned as is; after it, the error of the attempt that failed first
// when both fail. The losing connection is closed.
func Dial(ctx context.Context, dial func(context.Context) (net.Conn, error), stall time.Duration, onStall func()) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		c   net.Conn
		err error
	}
	results := make(chan result, 2)
	start := func() {
		go func() {
			c, err := dial(ctx)
			results <- result{c, err}
		}()
	}
	start()
	timer := time.NewTimer(stall)
	defer timer.Stop()
	started, pending := 1, 1
	var firstErr error
	for {
		select {
		case <-timer.C:
			stalls.Add(1)
			if onStall != nil {
				onStall()
			}
			started++
			pending++
			start()
		case r := <-results:
			pending--
			if r.err == nil {
				if pending > 0 {
					go func() { // the loser, cancelled below
						if o := <-results; o.c != nil {
							o.c.Close()
						}
					}()
				}
				return r.c, nil
			}
			if firstErr == nil {
				firstErr = r.err
			}
			if started == 1 || pending == 0 {
				return nil, firstErr
			}
		}
	}
}

// NewTransport is an http.Transport for requests to sandboxes: its dials
// race (DialContext, with net/http's default 30 s dial timeout), and it
// pools no connection: a pool is keyed by address, and a killed sandbox's
// address is soon a new sandbox's, which would reset a stale connection
// (the proxy, which pools, keys its pool by sandbox ID instead).
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // sandboxes are reached directly, never through the host's HTTP proxy
	t.DialContext = DialContext(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}, nil)
	t.DisableKeepAlives = true
	return t
}
