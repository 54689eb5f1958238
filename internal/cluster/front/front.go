// Package front is the cluster's front door. Every server answers the
// whole API (REST and sandbox traffic); a request about a sandbox that
// another node holds, and a create that placement puts on another node,
// go on to that node's node API: the same API, served on the node's own
// listener with mutual TLS under the cluster CA (package cluster/join).
// The request goes on as the client sent it, API key and envd token
// included, so the node checks them against the shared store exactly as
// it would for a client of its own; nothing is trusted because it came
// from a peer, and the node acts only on sandboxes it holds.
package front

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/cluster"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/proxy"
	"github.com/moatsh/moat/internal/store"
)

// Store is what the front door reads of the shared store.
type Store interface {
	GetSandbox(ctx context.Context, id string) (store.Sandbox, error)
	GetNode(ctx context.Context, id string) (store.Node, error)
	NodeLoads(ctx context.Context) ([]store.NodeLoad, error)
	GetTemplate(ctx context.Context, idOrName string) (store.Template, error)
	// TemplateHolders are the nodes that copied a template's tree.
	TemplateHolders(ctx context.Context, id, digest string) ([]string, error)
	// GetVolume and CheckAPIKey find the node of a volume (volumes.go).
	GetVolume(ctx context.Context, team, ref string) (store.Volume, error)
	CheckAPIKey(ctx context.Context, key string) (team string, ok bool, err error)
}

// HeaderForwarded names, on a request a server sent on to a node, the
// sender's node ID (for the node's logs; nothing trusts it). A node's
// listener serves its own API only, so a request is sent on at most once.
const HeaderForwarded = "Moat-Forwarded-By"

// Config wires a Front. Local, Store and Self are required.
type Config struct {
	Self  string       // this server's node ID
	Local http.Handler // this server's API and sandbox proxy
	// Holds reports whether this server holds sandbox id (its
	// orchestrator knows it): such requests stay here without a lookup.
	Holds func(id string) bool
	// Node: placement may put sandboxes on this server (role node).
	Node  bool
	Store Store
	// TLS is the client end of the node API's mutual TLS
	// (join.TLSConfig); nil: nothing is forwarded (one server alone).
	TLS       *tls.Config
	Domain    string // sandbox host domain, as the proxy's
	Placement cluster.Placement
	Log       *slog.Logger
}

// Front is the front door's http.Handler.
type Front struct {
	c Config

	mu     sync.Mutex
	routes map[string]route                  // sandbox ID → its node, for routeTTL
	known  map[string]knownNode              // node ID → its registry entry, for nodeTTL
	nodes  map[string]*httputil.ReverseProxy // node ID → its forwarder
	tr     map[string]*http.Transport
}

type route struct {
	node string
	at   time.Time
}

type knownNode struct {
	n  store.Node
	at time.Time
}

// routeTTL bounds how long a sandbox's node is remembered: sandboxes do
// not move, so it only bounds the map's growth and a deleted row's life.
// nodeTTL bounds how late a node's loss or new address is seen. While
// the store does not answer, what is remembered is used however old, so
// traffic to running sandboxes keeps flowing through an outage.
const (
	routeTTL = 30 * time.Second
	nodeTTL  = 2 * time.Second
)

// New returns the front door of c.
func New(c Config) *Front {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Holds == nil {
		c.Holds = func(string) bool { return false }
	}
	return &Front{c: c, routes: map[string]route{}, known: map[string]knownNode{}, nodes: map[string]*httputil.ReverseProxy{}, tr: map[string]*http.Transport{}}
}

// apiSandbox matches the REST paths about one sandbox.
var apiSandbox = regexp.MustCompile(`^(?:/v2)?/sandboxes/([^/]+)(?:/|$)`)

func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.c.TLS == nil {
		f.c.Local.ServeHTTP(w, r)
		return
	}
	id, traffic := proxy.SandboxOf(r, f.c.Domain)
	if !traffic {
		if m := apiSandbox.FindStringSubmatch(r.URL.Path); m != nil {
			id = shortID(m[1])
		}
	}
	switch {
	case id != "":
		f.serveSandbox(w, r, id, traffic)
	case r.Method == http.MethodPost && (r.URL.Path == "/sandboxes" || r.URL.Path == "/v2/sandboxes"):
		f.create(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/volumes":
		f.createVolume(w, r)
	case apiVolume.MatchString(r.URL.Path):
		f.serveVolume(w, r, apiVolume.FindStringSubmatch(r.URL.Path)[1])
	default:
		f.c.Local.ServeHTTP(w, r)
	}
}

// shortID is the sandbox ID of "<id>" or "<id>-<clientID>".
func shortID(raw string) string {
	id, _, _ := strings.Cut(raw, "-")
	return id
}

// serveSandbox sends r to the node that holds sandbox id, or answers it
// here when that is this server, or nobody (the local answer for an
// unknown sandbox is the right one then).
func (f *Front) serveSandbox(w http.ResponseWriter, r *http.Request, id string, traffic bool) {
	if f.c.Holds(id) {
		f.c.Local.ServeHTTP(w, r)
		return
	}
	node, err := f.nodeOf(r.Context(), id)
	if err != nil {
		errhttp.WriteError(w, fmt.Errorf("route sandbox %s: %w", id, err))
		return
	}
	if node == "" || node == f.c.Self {
		f.c.Local.ServeHTTP(w, r)
		return
	}
	n, err := f.node(r.Context(), node)
	if err != nil && !errdefs.IsNotFound(err) {
		errhttp.WriteError(w, fmt.Errorf("route sandbox %s: %w", id, err))
		return
	}
	if err != nil || n.Lost || n.Addr == "" {
		// A lost node's sandboxes are gone: answered as an unknown one.
		f.c.Log.DebugContext(r.Context(), "front: sandbox on an unreachable node", "sandbox", id, "node", node, "err", err)
		f.gone(w, r, id, traffic)
		return
	}
	f.forward(w, r, n)
}

// gone answers as for a sandbox nobody knows: E2B's 502 for traffic, 404
// for the API.
func (f *Front) gone(w http.ResponseWriter, _ *http.Request, id string, traffic bool) {
	if traffic {
		errhttp.WriteJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": 502})
		return
	}
	errhttp.WriteError(w, errdefs.Publicf(errdefs.ErrNotFound, "sandbox %q not found", id))
}

// nodeOf is the node of sandbox id's row ("" for no row), remembered for
// routeTTL.
func (f *Front) nodeOf(ctx context.Context, id string) (string, error) {
	now := time.Now()
	f.mu.Lock()
	rt, ok := f.routes[id]
	f.mu.Unlock()
	if ok && now.Sub(rt.at) < routeTTL {
		return rt.node, nil
	}
	sb, err := f.c.Store.GetSandbox(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		if ok { // the store does not answer: what was known still holds
			return rt.node, nil
		}
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.routes) > 100_000 {
		clear(f.routes)
	}
	f.routes[id] = route{node: sb.NodeID, at: now}
	return sb.NodeID, nil
}

// node is node id's registry entry, remembered for nodeTTL (and past it
// while the store does not answer).
func (f *Front) node(ctx context.Context, id string) (store.Node, error) {
	now := time.Now()
	f.mu.Lock()
	k, ok := f.known[id]
	f.mu.Unlock()
	if ok && now.Sub(k.at) < nodeTTL {
		return k.n, nil
	}
	n, err := f.c.Store.GetNode(ctx, id)
	if err != nil {
		if ok && !errdefs.IsNotFound(err) {
			return k.n, nil
		}
		return store.Node{}, err
	}
	f.mu.Lock()
	f.known[id] = knownNode{n: n, at: now}
	f.mu.Unlock()
	return n, nil
}

// forward sends r on to node n, streaming both ways.
func (f *Front) forward(w http.ResponseWriter, r *http.Request, n store.Node) {
	_ = http.NewResponseController(w).EnableFullDuplex() // see proxy.ServeHTTP
	f.forwarder(n).ServeHTTP(w, r)
}

// forwarder is node n's reverse proxy (one per node and address).
func (f *Front) forwarder(n store.Node) *httputil.ReverseProxy {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := n.ID + "@" + n.Addr
	if rp, ok := f.nodes[key]; ok {
		return rp
	}
	tr := f.transport(n)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", n.Addr
			pr.Out.Host = pr.In.Host // sandbox traffic is routed by its host
			pr.Out.Header.Set(HeaderForwarded, f.c.Self)
			pr.SetXForwarded()
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.c.Log.WarnContext(r.Context(), "front: node does not answer", "node", n.ID, "addr", n.Addr, "err", err)
			f.mu.Lock()
			delete(f.known, n.ID) // the next request reads its entry again (a restarted node may listen elsewhere)
			f.mu.Unlock()
			if r.Context().Err() != nil {
				return
			}
			errhttp.WriteError(w, errdefs.Publicf(errdefs.ErrUnavailable, "node %s does not answer; try again shortly", n.ID))
		},
	}
	f.nodes[key] = rp
	return rp
}

// transport is the mutual-TLS transport to node n (f.mu held).
func (f *Front) transport(n store.Node) *http.Transport {
	key := n.ID + "@" + n.Addr
	if tr, ok := f.tr[key]; ok {
		return tr
	}
	tc := f.c.TLS.Clone()
	tc.ServerName = n.ID // its certificate names it
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
	f.tr[key] = tr
	return tr
}

// Close drops idle connections to the nodes.
func (f *Front) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tr := range f.tr {
		tr.CloseIdleConnections()
	}
}

// maxCreateBody bounds the create body the front door reads to place it
// (the API's own bound).
const maxCreateBody = 1 << 20

// create places a new sandbox: on this server when placement chooses it
// (or no node is reachable but this one and nothing pins the sandbox
// elsewhere), else on the chosen node.
func (f *Front) create(w http.ResponseWriter, r *http.Request) {
	body, ok := f.readBody(w, r)
	if !ok {
		return
	}
	need, err := f.need(r.Context(), r, body)
	if err != nil {
		errhttp.WriteError(w, err)
		return
	}
	order, err := f.candidates(r.Context(), need)
	if (err != nil || len(order) == 0) && f.c.Node && need.Node == "" {
		f.c.Local.ServeHTTP(w, withBody(r, body))
		return
	}
	f.tryNodes(w, r, body, order, err)
}

// readBody reads a create's body to place it; one that cannot be read or
// is past maxCreateBody gets this server's own answer (false).
func (f *Front) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCreateBody+1))
	if err != nil || len(body) > maxCreateBody {
		f.c.Local.ServeHTTP(w, withBody(r, body)) // the API's own answer
		return nil, false
	}
	return body, true
}

// tryNodes sends the request with body to the first node of order (this
// server's own API when it is this one); a node that answers 429 or 503
// makes it try the next one, as long as one is left. err (or an empty
// order) is answered as it is.
func (f *Front) tryNodes(w http.ResponseWriter, r *http.Request, body []byte, order []store.Node, err error) {
	if err == nil && len(order) == 0 {
		err = errdefs.Publicf(errdefs.ErrUnavailable, "no node is available to run sandboxes; try again shortly")
	}
	if err != nil {
		errhttp.WriteError(w, err)
		return
	}
	for i, n := range order {
		if n.ID == f.c.Self {
			f.c.Local.ServeHTTP(w, withBody(r, body))
			return
		}
		if i == len(order)-1 {
			f.forward(w, withBody(r, body), n)
			return
		}
		rec := &buffered{h: http.Header{}}
		f.forwarder(n).ServeHTTP(rec, withBody(r, body))
		if rec.status != http.StatusServiceUnavailable && rec.status != http.StatusTooManyRequests {
			rec.copyTo(w)
			return
		}
		f.c.Log.InfoContext(r.Context(), "front: node refused a create, trying the next", "node", n.ID, "status", rec.status)
	}
}

// need is what the create in body asks of its node: its template's memory,
// the runtime its metadata names and the node of the volumes it mounts
// (zero values when unknown: the node answers a bad body itself).
func (f *Front) need(ctx context.Context, r *http.Request, body []byte) (cluster.Need, error) {
	var req struct {
		TemplateID   string            `json:"templateID"`
		Metadata     map[string]string `json:"metadata"`
		VolumeMounts []struct {
			Name string `json:"name"`
		} `json:"volumeMounts"`
	}
	_ = json.Unmarshal(body, &req)
	need := cluster.Need{Runtime: req.Metadata["moat.runtime"]}
	if req.TemplateID != "" {
		if t, err := f.c.Store.GetTemplate(ctx, req.TemplateID); err == nil {
			need.MemoryMB, need.Template = t.MemoryMB, t.ID
			if t.NodeID != "" { // built on a node: prefer those that hold it
				held, _ := f.c.Store.TemplateHolders(ctx, t.ID, t.Digest)
				need.Prefer = append(held, t.NodeID)
			}
		}
	}
	if len(req.VolumeMounts) > 0 {
		names := make([]string, len(req.VolumeMounts))
		for i, m := range req.VolumeMounts {
			names[i] = m.Name
		}
		node, err := f.volumesNode(ctx, r.Header.Get("X-API-KEY"), names)
		if err != nil {
			return need, err
		}
		need.Node = node
	}
	return need, nil
}

// candidates are the nodes a create may go to, best first: the one
// placement picks, then the others it would pick after it. Only this
// server and nodes with a node API address count.
func (f *Front) candidates(ctx context.Context, need cluster.Need) ([]store.Node, error) {
	loads, err := f.c.Store.NodeLoads(ctx)
	if err != nil {
		return nil, err
	}
	loads = slices.DeleteFunc(loads, func(l store.NodeLoad) bool {
		if l.ID == f.c.Self {
			return !f.c.Node
		}
		return l.Addr == "" || len(l.Runtimes) == 0 // an API server's node API serves templates only
	})
	// Placement breaks a tie by the order it is given (the smallest ID
	// first): shuffled, creates one after another spread over equal nodes.
	rand.Shuffle(len(loads), func(i, j int) { loads[i], loads[j] = loads[j], loads[i] })
	ids, err := f.c.Placement.Rank(loads, need)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]store.Node, len(loads))
	for _, l := range loads {
		byID[l.ID] = l.Node
	}
	out := make([]store.Node, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out, nil
}

// withBody is r with body as its body again.
func withBody(r *http.Request, body []byte) *http.Request {
	r2 := r.Clone(r.Context())
	r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return r2
}

// buffered keeps a small answer (a create's) to pass on or drop.
type buffered struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (b *buffered) Header() http.Header { return b.h }
func (b *buffered) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}
func (b *buffered) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *buffered) copyTo(w http.ResponseWriter) {
	for k, v := range b.h {
		w.Header()[k] = v
	}
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body.Bytes())
}
