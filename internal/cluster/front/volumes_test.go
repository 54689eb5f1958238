package front

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/store"
)

// TestVolumes: a volume's API and content API go to the node that holds
// it; a new volume through an API server alone goes to a node; a create
// that mounts volumes runs on their node, every time; volumes of two
// nodes together are 400; a volume whose node is lost is 503.
func TestVolumes(t *testing.T) {
	c := newTestCluster(t)
	st := &fakeStore{nodes: map[string]store.NodeLoad{
		"b": c.node(t, "b", answer("b", 200)),
		"c": c.node(t, "c", answer("c", 200)),
	}, volumes: []store.Volume{
		{ID: "vonb", Team: "t", Name: "data", Node: "b"},
		{ID: "vonc", Team: "t", Name: "cache", Node: "c"},
		{ID: "valone", Team: "t", Name: "old"}, // made by a server alone
		{ID: "vtheirs", Team: "u", Name: "theirs", Node: "c"},
	}, keys: map[string]string{"key-t": "t"}}
	f := New(Config{Self: "a", Local: answer("local", 200), Store: st, TLS: c.tls(t, "a")})
	req := func(method, path, body, key string) (int, string) {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("X-API-KEY", key)
		w := httptest.NewRecorder()
		f.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	create := func(names ...string) string {
		var ms []string
		for _, n := range names {
			ms = append(ms, `{"name":"`+n+`","path":"/mnt/`+n+`"}`)
		}
		return `{"templateID":"base","volumeMounts":[` + strings.Join(ms, ",") + `]}`
	}
	for _, tc := range []struct {
		name, method, path, body, key string
		code                          int
		want                          string
	}{
		{"get a volume on b", "GET", "/volumes/vonb", "", "key-t", 200, "b GET /volumes/vonb by a"},
		{"delete a volume on c", "DELETE", "/volumes/vonc", "", "key-t", 200, "c DELETE /volumes/vonc"},
		{"content API on b", "PUT", "/volumecontent/vonb/file?path=/x", "hi", "", 200, "b PUT /volumecontent/vonb/file"},
		{"an unknown volume: the local answer", "GET", "/volumes/nope", "", "key-t", 200, "local GET"},
		{"a volume of a server alone: local", "GET", "/volumes/valone", "", "key-t", 200, "local GET"},
		{"a create mounting data runs on b", "POST", "/sandboxes", create("data"), "key-t", 200, "b POST /sandboxes"},
		{"and with a volume without a node", "POST", "/v2/sandboxes", create("old", "data"), "key-t", 200, "b POST"},
		{"volumes of two nodes", "POST", "/sandboxes", create("data", "cache"), "key-t", 400, "different nodes"},
		{"another team's name does not pin", "POST", "/sandboxes", create("theirs", "data"), "key-t", 200, "b POST"},
	} {
		for range 5 { // placement alone would spread them over b and c
			code, body := req(tc.method, tc.path, tc.body, tc.key)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Fatalf("%s: %d %q, want %d %q", tc.name, code, body, tc.code, tc.want)
			}
		}
	}
	// A new volume goes to a node, not to this API server.
	nodes := map[string]bool{}
	for range 20 {
		code, body := req("POST", "/volumes", `{"name":"v"}`, "key-t")
		if code != 200 || strings.HasPrefix(body, "local") {
			t.Fatalf("create volume: %d %q", code, body)
		}
		nodes[body[:1]] = true
	}
	if len(nodes) != 2 {
		t.Errorf("20 new volumes went to %v, want both nodes", nodes)
	}
	// b is lost: its volumes are unavailable, and so are creates that mount them.
	b := st.nodes["b"]
	b.Lost = true
	st.nodes["b"] = b
	f = New(Config{Self: "a", Local: answer("local", 200), Store: st, TLS: c.tls(t, "a")})
	if code, body := req("GET", "/volumes/vonb", "", "key-t"); code != 503 || !strings.Contains(body, "node b") {
		t.Errorf("a lost node's volume: %d %q", code, body)
	}
	if code, body := req("POST", "/sandboxes", create("data"), "key-t"); code != 503 || !strings.Contains(body, "holds the sandbox's volumes") {
		t.Errorf("a create mounting a lost node's volume: %d %q", code, body)
	}
}
