package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// errSandboxRemoved cancels the requests of a sandbox that CloseSandbox
// was called for.
var errSandboxRemoved = errors.New("proxy: sandbox removed")

// CloseSandbox ends everything the proxy holds open to sandbox id: its
// requests in flight (a stream being copied is cut, one not answered yet
// gets the 502 of a sandbox that is gone) and its upstream connections,
// idle or upgraded. The orchestrator calls it before a kill (OnKill),
// while the sandbox still takes the resets, and again when the sandbox
// leaves the routing table (killed, timed out, died): a killed microVM or
// gVisor sandbox never resets its TCP connections, so clients would
// otherwise hang until TCP gives up.
func (p *Proxy) CloseSandbox(id string) {
	if n := p.open.close(id); n > 0 {
		p.log.Debug("closed the proxy's connections to a removed sandbox", "sandboxID", id, "count", n)
	}
}

// follow records request r to sandbox id until unfollow is called (when
// the handler returns), so that CloseSandbox can end it: r's context is
// cancelled with errSandboxRemoved, and, while the request body is still
// being read, the client connection's read deadline passes, because a body
// being copied upstream holds the transport until its next read returns.
//
// Once the body is read, the deadline must not move: the server then reads
// ahead on the keep-alive connection (to see a client go away), a timeout
// there cancels the connection's context, and with it every later request
// on that connection — another sandbox's, answered with an empty 200 that
// the SDKs report as "unsupported content type null".
func (p *Proxy) follow(w http.ResponseWriter, r *http.Request, id string) (_ *http.Request, unfollow func()) {
	ctx, cancel := context.WithCancelCause(r.Context())
	rc := http.NewResponseController(w)
	body := &bodyEnd{ReadCloser: r.Body}
	if r.Body == nil || r.Body == http.NoBody {
		body.ended.Store(true)
	}
	var mu sync.Mutex
	done := false // the handler returned: w may serve the next request
	remove := p.open.add(id, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			cancel(errSandboxRemoved)
			if !body.ended.Load() {
				_ = rc.SetReadDeadline(time.Now())
			}
		}
	})
	r = r.WithContext(ctx)
	if !body.ended.Load() {
		r.Body = body
	}
	return r, func() {
		mu.Lock()
		done = true
		mu.Unlock()
		remove()
		cancel(nil)
	}
}

// bodyEnd is a request body that records when a read first fails (EOF
// included): from then on the server may be reading ahead.
type bodyEnd struct {
	io.ReadCloser
	ended atomic.Bool
}

func (b *bodyEnd) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.ended.Store(true)
	}
	return n, err
}

// openSet is what the proxy has open per sandbox ID, each as the func that
// ends it. The zero value is ready. Safe for concurrent use.
type openSet struct {
	mu sync.Mutex
	by map[string]map[*openItem]struct{} // guarded by mu
}

type openItem struct{ end func() }

// add records end under id until the returned remove is called.
func (s *openSet) add(id string, end func()) (remove func()) {
	it := &openItem{end: end}
	s.mu.Lock()
	if s.by == nil {
		s.by = map[string]map[*openItem]struct{}{}
	}
	if s.by[id] == nil {
		s.by[id] = map[*openItem]struct{}{}
	}
	s.by[id][it] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if set := s.by[id]; set != nil {
			delete(set, it)
			if len(set) == 0 {
				delete(s.by, id)
			}
		}
	}
}

// close ends and forgets everything recorded under id; it returns how many.
func (s *openSet) close(id string) int {
	s.mu.Lock()
	set := s.by[id]
	delete(s.by, id)
	s.mu.Unlock()
	for it := range set {
		it.end()
	}
	return len(set)
}

// track records c under id until it is closed; closed through the set
// (the sandbox was removed), c is reset (abort).
func (s *openSet) track(id string, c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c}
	tc.remove = s.add(id, func() { abort(c) })
	return tc
}

// abort closes c with a reset instead of a FIN. The sandbox is going, or
// gone: after its network's teardown a FIN would find no one to
// acknowledge it, and the orphaned socket would send it again and again —
// to the next sandbox given the address, whose resets the firewall drops
// (no conntrack entry is left for the old connection). A reset is sent
// once and frees the socket at once.
func abort(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(sec int) error }); ok {
		_ = l.SetLinger(0)
	}
	_ = c.Close()
}

// trackedConn is an upstream connection that leaves its openSet on Close.
type trackedConn struct {
	net.Conn
	once   sync.Once
	remove func()
}

func (c *trackedConn) Close() error {
	c.once.Do(c.remove)
	return c.Conn.Close()
}
