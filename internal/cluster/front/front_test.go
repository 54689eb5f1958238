package front

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/cluster/join"
	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// fakeStore is the registry and the sandbox rows of a test.
type fakeStore struct {
	nodes     map[string]store.NodeLoad
	sandboxes map[string]string // ID → node
	volumes   []store.Volume
	keys      map[string]string // API key → team
	gets      atomic.Int32
	down      atomic.Bool // every read fails as in a store outage
}

func (s *fakeStore) GetSandbox(_ context.Context, id string) (store.Sandbox, error) {
	s.gets.Add(1)
	if s.down.Load() {
		return store.Sandbox{}, errdefs.ErrUnavailable
	}
	n, ok := s.sandboxes[id]
	if !ok {
		return store.Sandbox{}, errdefs.ErrNotFound
	}
	return store.Sandbox{ID: id, NodeID: n}, nil
}

func (s *fakeStore) GetNode(_ context.Context, id string) (store.Node, error) {
	if s.down.Load() {
		return store.Node{}, errdefs.ErrUnavailable
	}
	n, ok := s.nodes[id]
	if !ok {
		return store.Node{}, errdefs.ErrNotFound
	}
	return n.Node, nil
}

func (s *fakeStore) NodeLoads(context.Context) ([]store.NodeLoad, error) {
	var out []store.NodeLoad
	for _, n := range s.nodes {
		out = append(out, n)
	}
	return out, nil
}

func (s *fakeStore) GetTemplate(_ context.Context, id string) (store.Template, error) {
	return store.Template{ID: id, MemoryMB: 512}, nil
}

func (s *fakeStore) GetVolume(_ context.Context, team, ref string) (store.Volume, error) {
	for _, v := range s.volumes {
		if (v.ID == ref || (team != "" && v.Name == ref)) && (team == "" || v.Team == team) {
			return v, nil
		}
	}
	return store.Volume{}, errdefs.ErrNotFound
}

func (s *fakeStore) TemplateHolders(context.Context, string, string) ([]string, error) {
	return nil, nil
}

func (s *fakeStore) CheckAPIKey(_ context.Context, key string) (string, bool, error) {
	team, ok := s.keys[key]
	return team, ok, nil
}

// cluster is a CA and the TLS configs of its members.
type testCluster struct{ is *join.Issuer }

func newTestCluster(t *testing.T) *testCluster {
	ca, err := tlsca.Open(filepath.Join(t.TempDir(), "ca"), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	return &testCluster{is: &join.Issuer{CA: ca}}
}

func (c *testCluster) tls(t *testing.T, id string) *tls.Config {
	key, cert, ca, err := c.is.Self(id)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := join.TLSConfig(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// node serves h as node id's node API and returns its load entry.
func (c *testCluster) node(t *testing.T, id string, h http.HandlerFunc) store.NodeLoad {
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = c.tls(t, id)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return store.NodeLoad{Node: store.Node{ID: id, Addr: strings.TrimPrefix(srv.URL, "https://"), Runtimes: []string{"container"},
		MemoryMB: 1024, LeaseUntil: time.Now().Add(time.Hour)}}
}

// answer is a node API that answers status with its name.
func answer(name string, status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, name+" "+r.Method+" "+r.URL.Path+" by "+r.Header.Get(HeaderForwarded))
	}
}

func do(t *testing.T, h http.Handler, method, path string, hdr map[string]string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(`{"templateID":"base"}`))
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func TestRouting(t *testing.T) {
	c := newTestCluster(t)
	st := &fakeStore{nodes: map[string]store.NodeLoad{
		"b": c.node(t, "b", answer("b", 200)),
		"c": c.node(t, "c", answer("c", 200)),
	}, sandboxes: map[string]string{"onb": "b", "onc": "c", "ona": "a", "onlost": "lost", "nodeless": ""}}
	lost := c.node(t, "lost", answer("lost", 200))
	lost.Lost = true
	st.nodes["lost"] = lost
	local := answer("local", 200)
	f := New(Config{Self: "a", Local: local, Store: st, TLS: c.tls(t, "a"),
		Holds: func(id string) bool { return id == "held" }})
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
		code               int
		want               string
	}{
		{"API call for a sandbox on b", "GET", "/sandboxes/onb", nil, 200, "b GET /sandboxes/onb by a"},
		{"v2 path with a client ID", "POST", "/v2/sandboxes/onc-x1/connect", nil, 200, "c POST /v2/sandboxes/onc-x1/connect by a"},
		{"envd traffic by header", "POST", "/process.Process/Start", map[string]string{"E2b-Sandbox-Id": "onb", "E2b-Sandbox-Port": "49983"}, 200, "b POST /process.Process/Start"},
		{"a sandbox held here", "GET", "/sandboxes/held", nil, 200, "local GET"},
		{"a row of this node", "DELETE", "/sandboxes/ona", nil, 200, "local DELETE"},
		{"no row: the local answer", "GET", "/sandboxes/unknown", nil, 200, "local GET"},
		{"a row without a node", "GET", "/sandboxes/nodeless", nil, 200, "local GET"},
		{"a lost node's sandbox is unknown", "GET", "/sandboxes/onlost", nil, 404, "not found"},
		{"a lost node's traffic is E2B's 502", "GET", "/health", map[string]string{"E2b-Sandbox-Id": "onlost", "E2b-Sandbox-Port": "49983"}, 502, "was not found"},
		{"not about a sandbox", "GET", "/templates", nil, 200, "local GET /templates"},
		{"a malformed ID stays local", "GET", "/sandboxes/..%2f", nil, 200, "local"},
	} {
		code, body := do(t, f, tc.method, tc.path, tc.hdr)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, code, body, tc.code, tc.want)
		}
	}
	// Routes are remembered: a second request reads no row.
	before := st.gets.Load()
	do(t, f, "GET", "/sandboxes/onb", nil)
	if st.gets.Load() != before {
		t.Error("the route of onb was read again")
	}
}

func TestCreatePlacement(t *testing.T) {
	c := newTestCluster(t)
	for _, tc := range []struct {
		name     string
		b, cc    int // statuses of nodes b and c
		bLoad    int // memory already reserved on b
		selfNode bool
		code     int
		want     string
	}{
		{"the emptier node gets it", 200, 200, 2000, false, 200, "c POST /sandboxes"},
		{"a full node's refusal tries the next", 200, 503, 2000, false, 200, "b POST /sandboxes"},
		{"429 also tries the next", 429, 200, 0, false, 200, "c POST"},
		{"every node refuses: the last answer", 503, 503, 0, false, 503, "POST"},
		{"this server is a node too", 200, 200, 4090, true, 200, ""},
	} {
		st := &fakeStore{nodes: map[string]store.NodeLoad{"b": c.node(t, "b", answer("b", tc.b)), "c": c.node(t, "c", answer("c", tc.cc))}}
		b := st.nodes["b"]
		b.ReservedMB = tc.bLoad
		st.nodes["b"] = b
		if tc.selfNode {
			st.nodes["a"] = store.NodeLoad{Node: store.Node{ID: "a", MemoryMB: 8192, LeaseUntil: time.Now().Add(time.Hour)}}
		}
		f := New(Config{Self: "a", Local: answer("local", 201), Node: tc.selfNode, Store: st, TLS: c.tls(t, "a")})
		code, body := do(t, f, "POST", "/sandboxes", nil)
		if tc.selfNode {
			tc.code, tc.want = 201, "local POST"
		}
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, code, body, tc.code, tc.want)
		}
	}
	// An API server alone with no node: 503, not a local create.
	f := New(Config{Self: "a", Local: answer("local", 201), Store: &fakeStore{}, TLS: c.tls(t, "a")})
	if code, body := do(t, f, "POST", "/v2/sandboxes", nil); code != 503 || strings.Contains(body, "local") {
		t.Errorf("no node: %d %q, want 503", code, body)
	}
}

// A node that does not answer is 503 (it may come back), and a peer whose
// certificate is not the cluster CA's is not talked to.
func TestUnreachableAndStrangers(t *testing.T) {
	c, other := newTestCluster(t), newTestCluster(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	stranger := other.node(t, "s", answer("stranger", 200))
	st := &fakeStore{nodes: map[string]store.NodeLoad{
		"dead": {Node: store.Node{ID: "dead", Addr: dead, LeaseUntil: time.Now().Add(time.Hour)}},
		"s":    stranger,
	}, sandboxes: map[string]string{"ondead": "dead", "ons": "s"}}
	f := New(Config{Self: "a", Local: answer("local", 200), Store: st, TLS: c.tls(t, "a")})
	for _, id := range []string{"ondead", "ons"} {
		if code, body := do(t, f, "GET", "/sandboxes/"+id, nil); code != 503 || strings.Contains(body, "stranger") {
			t.Errorf("%s: %d %q, want 503", id, code, body)
		}
	}
}

// While the store does not answer, sandboxes whose node was known keep
// their traffic (however old what is known); others get 503.
func TestStoreOutage(t *testing.T) {
	c := newTestCluster(t)
	st := &fakeStore{nodes: map[string]store.NodeLoad{"b": c.node(t, "b", answer("b", 200))},
		sandboxes: map[string]string{"onb": "b", "other": "b"}}
	f := New(Config{Self: "a", Local: answer("local", 200), Store: st, TLS: c.tls(t, "a")})
	if code, body := do(t, f, "GET", "/sandboxes/onb", nil); code != 200 || !strings.Contains(body, "b GET") {
		t.Fatalf("before the outage: %d %q", code, body)
	}
	st.down.Store(true)
	f.mu.Lock()
	for id, r := range f.routes {
		r.at = time.Time{}
		f.routes[id] = r
	}
	for id, k := range f.known {
		k.at = time.Time{}
		f.known[id] = k
	}
	f.mu.Unlock()
	if code, body := do(t, f, "GET", "/sandboxes/onb", nil); code != 200 || !strings.Contains(body, "b GET") {
		t.Errorf("during the outage, a known sandbox: %d %q, want it forwarded", code, body)
	}
	if code, _ := do(t, f, "GET", "/sandboxes/other", nil); code != 503 {
		t.Errorf("during the outage, an unknown route: %d, want 503", code)
	}
}

// Creates one after another over equal nodes spread (placement's tie
// goes to a node at random, not always the first by ID).
func TestCreatesSpread(t *testing.T) {
	c := newTestCluster(t)
	st := &fakeStore{nodes: map[string]store.NodeLoad{"b": c.node(t, "b", answer("b", 200)), "c": c.node(t, "c", answer("c", 200))}}
	f := New(Config{Self: "a", Local: answer("local", 201), Store: st, TLS: c.tls(t, "a")})
	got := map[string]int{}
	for range 40 {
		_, body := do(t, f, "POST", "/sandboxes", nil)
		got[body[:1]]++
	}
	if got["b"] < 5 || got["c"] < 5 {
		t.Errorf("40 creates over two equal nodes: %v", got)
	}
}
