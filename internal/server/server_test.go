package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
)

type harness struct {
	t   *testing.T
	url string
	key string
	env *orchestratortest.Env
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	env := orchestratortest.New(t, orchestrator.Config{MaxTimeout: time.Hour})
	key, err := env.DB.CreateAPIKey(context.Background(), store.DefaultTeam)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(server.Config{Store: env.DB, Orch: env.Orch}))
	t.Cleanup(ts.Close)
	return &harness{t: t, url: ts.URL, key: key, env: env}
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("bad JSON %q: %v", r.body, err)
	}
}

// errBody checks an E2B error body whose code equals the status.
func (r resp) errBody(t *testing.T, status int) string {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content-type %q", ct)
	}
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	r.json(t, &e)
	if e.Code != status || e.Message == "" {
		t.Fatalf("error body %s", r.body)
	}
	return e.Message
}

func (h *harness) do(method, path, body string) resp {
	return h.doKey(method, path, body, h.key)
}

func (h *harness) doKey(method, path, body, key string) resp {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, h.url+path, rd)
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	req.Header.Set("Content-Type", "application/json")
	return h.send(req)
}

// send sends req and reads the whole answer.
func (h *harness) send(req *http.Request) resp {
	h.t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

func (h *harness) create(body string) map[string]any {
	h.t.Helper()
	r := h.do("POST", "/v2/sandboxes", body)
	if r.status != http.StatusCreated {
		h.t.Fatalf("create: %d %s", r.status, r.body)
	}
	var m map[string]any
	r.json(h.t, &m)
	return m
}

func TestHealthNoKey(t *testing.T) {
	h := newHarness(t)
	if r := h.doKey("GET", "/health", "", ""); r.status != 200 {
		t.Fatalf("health %d", r.status)
	}
}

func TestAuth(t *testing.T) {
	h := newHarness(t)
	routes := [][2]string{
		{"POST", "/sandboxes"}, {"POST", "/v2/sandboxes"}, {"GET", "/sandboxes"}, {"GET", "/v2/sandboxes"},
		{"GET", "/sandboxes/iabc"}, {"DELETE", "/sandboxes/iabc"}, {"POST", "/sandboxes/iabc/timeout"},
		{"POST", "/sandboxes/iabc/refreshes"}, {"POST", "/sandboxes/iabc/pause"}, {"POST", "/sandboxes/iabc/resume"},
		{"POST", "/sandboxes/iabc/connect"}, {"POST", "/v2/sandboxes/iabc/connect"},
		{"GET", "/sandboxes/iabc/metrics"}, {"GET", "/templates"}, {"GET", "/v2/templates"},
	}
	for _, rt := range routes {
		for _, key := range []string{"", "e2b_0000000000000000000000000000000000000000"} {
			t.Run(rt[0]+rt[1]+"/"+key, func(t *testing.T) {
				h.doKey(rt[0], rt[1], `{}`, key).errBody(t, 401)
			})
		}
	}
}

func TestCreateAndGet(t *testing.T) {
	h := newHarness(t)
	m := h.create(`{"templateID":"base","metadata":{"a":"b"},"envVars":{"X":"1"},"autoPause":true}`)
	for _, k := range []string{"sandboxID", "templateID", "clientID", "envdVersion", "envdAccessToken"} {
		if s, _ := m[k].(string); s == "" {
			t.Fatalf("missing %s in %v", k, m)
		}
	}
	if m["clientID"] != "6532622b" || m["envdVersion"] != "0.6.13" || m["alias"] != "base" {
		t.Fatalf("create body %v", m)
	}
	if v := m["domain"]; v != nil { // omitted, like E2B's server (oapi-codegen, same spec) does
		t.Fatalf("domain %v", m)
	}
	id := m["sandboxID"].(string)
	r := h.do("GET", "/sandboxes/"+id, "")
	if r.status != 200 {
		t.Fatalf("get %d %s", r.status, r.body)
	}
	var d map[string]any
	r.json(t, &d)
	for _, k := range []string{"templateID", "sandboxID", "clientID", "startedAt", "cpuCount", "memoryMB",
		"diskSizeMB", "endAt", "state", "envdVersion", "metadata", "allowInternetAccess", "lifecycle", "envdAccessToken"} {
		if _, ok := d[k]; !ok {
			t.Fatalf("detail lacks %s: %s", k, r.body)
		}
	}
	if d["state"] != "running" || d["lifecycle"].(map[string]any)["onTimeout"] != "pause" {
		t.Fatalf("detail %s", r.body)
	}
	start, err1 := time.Parse(time.RFC3339, d["startedAt"].(string))
	end, err2 := time.Parse(time.RFC3339, d["endAt"].(string))
	if err1 != nil || err2 != nil || end.Sub(start) < 299*time.Second || end.Sub(start) > 301*time.Second {
		t.Fatalf("v2 default timeout: %v %v %v", start, end, d)
	}
	// "-clientID" suffix of SDK 1.x is stripped.
	if r := h.do("GET", "/sandboxes/"+id+"-6532622b", ""); r.status != 200 {
		t.Fatalf("suffixed get %d", r.status)
	}
	if in, _ := h.env.Runtime.Init(id); in.EnvVars["X"] != "1" {
		t.Fatalf("init %+v", in)
	}
}

func TestCreateV1(t *testing.T) {
	h := newHarness(t)
	r := h.do("POST", "/sandboxes", `{"templateID":"base"}`)
	if r.status != 201 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var m map[string]any
	r.json(t, &m)
	if _, ok := m["envdAccessToken"]; ok {
		t.Fatal("v1 without secure got a token")
	}
	sb, _ := h.env.Orch.Get(context.Background(), store.DefaultTeam, m["sandboxID"].(string))
	if d := sb.EndAt.Sub(sb.StartedAt); d != 15*time.Second {
		t.Fatalf("v1 default timeout %v", d)
	}
	r = h.do("POST", "/sandboxes", `{"templateID":"base","secure":true,"timeout":60,"allow_internet_access":false}`)
	r.json(t, &m)
	if m["envdAccessToken"] == nil {
		t.Fatal("secure v1 without token")
	}
}

func TestCreateErrors(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		name, path, body string
		status           int
		msg              string
	}{
		{"no body", "/v2/sandboxes", "", 400, "required"},
		{"bad json", "/v2/sandboxes", `{"templateID":`, 400, "invalid request body"},
		{"trailing", "/v2/sandboxes", `{"templateID":"base"} x`, 400, "trailing"},
		{"wrong type", "/v2/sandboxes", `{"templateID":5}`, 400, "templateID"},
		{"timeout type", "/sandboxes", `{"templateID":"base","timeout":"x"}`, 400, "timeout"},
		{"timeout overflow", "/sandboxes", `{"templateID":"base","timeout":99999999999}`, 400, "timeout"},
		{"metadata type", "/v2/sandboxes", `{"templateID":"base","metadata":{"a":1}}`, 400, "metadata"},
		{"missing template", "/v2/sandboxes", `{}`, 400, "templateID is required"},
		{"unknown template", "/v2/sandboxes", `{"templateID":"nope"}`, 404, "template 'nope' not found"},
		{"zero timeout", "/sandboxes", `{"templateID":"base","timeout":0}`, 400, "greater than 0"},
		{"negative timeout", "/v2/sandboxes", `{"templateID":"base","timeout":-5}`, 400, "greater than 0"},
		{"timeout above max", "/v2/sandboxes", `{"templateID":"base","timeout":7200}`, 400, "cannot be greater"},
		{"too large", "/v2/sandboxes", `{"templateID":"base","metadata":{"a":"` + strings.Repeat("x", 2<<20) + `"}}`, 413, "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := h.do("POST", tt.path, tt.body).errBody(t, tt.status)
			if !strings.Contains(msg, tt.msg) {
				t.Fatalf("message %q lacks %q", msg, tt.msg)
			}
		})
	}
	if h.env.Runtime.Count() != 0 {
		t.Fatal("sandbox created by a failing request")
	}
}

// sandboxRoutes are all the REST routes with a sandbox ID in the path.
var sandboxRoutes = [][3]string{
	{"GET", "/sandboxes/%s", ""}, {"DELETE", "/sandboxes/%s", ""}, {"POST", "/sandboxes/%s/timeout", `{"timeout":10}`},
	{"POST", "/sandboxes/%s/refreshes", `{}`}, {"POST", "/sandboxes/%s/pause", ""}, {"POST", "/sandboxes/%s/resume", `{}`},
	{"POST", "/sandboxes/%s/connect", `{"timeout":10}`}, {"POST", "/v2/sandboxes/%s/connect", ""},
	{"GET", "/sandboxes/%s/metrics", ""}, {"POST", "/sandboxes/%s/snapshots", `{}`}, {"POST", "/sandboxes/%s/fork", `{}`},
	{"PUT", "/sandboxes/%s/network", `{"allowOut":["1.1.1.1"]}`},
	{"GET", "/sandboxes/%s/logs", ""}, {"GET", "/v2/sandboxes/%s/logs", ""},
}

// TestSandboxIDValidationAndNotFound: a malformed ID gets exactly the 404
// body of an unknown well-formed one on every sandbox route, including IDs
// that would escape a path.
func TestSandboxIDValidationAndNotFound(t *testing.T) {
	h := newHarness(t)
	for _, c := range sandboxRoutes {
		for _, tc := range []struct{ id, shown string }{
			{"inotthere", "inotthere"}, {"inotthere-6532622b", "inotthere"},
			{"ABC", "ABC"}, {"a-b-c", "a-b-c"}, {"a_b", "a_b"}, {"..", ".."}, {"../etc", "../etc"},
			{"a%00b", "a%00b"}, {"%2e%2e", "%2e%2e"}, {strings.Repeat("x", 300) + "!", strings.Repeat("x", 300) + "!"},
		} {
			t.Run(c[0]+c[1]+tc.id, func(t *testing.T) {
				msg := h.do(c[0], strings.Replace(c[1], "%s", url.PathEscape(tc.id), 1), c[2]).errBody(t, 404)
				if want := `Sandbox "` + tc.shown + `" doesn't exist or you don't have access to it`; msg != want {
					t.Fatalf("message %q, want %q", msg, want)
				}
			})
		}
	}
}

func TestLifecycleEndpoints(t *testing.T) {
	h := newHarness(t)
	id := h.create(`{"templateID":"base"}`)["sandboxID"].(string)
	p := "/sandboxes/" + id

	if r := h.do("POST", p+"/connect", `{"timeout":60}`); r.status != 200 {
		t.Fatalf("connect running %d %s", r.status, r.body)
	}
	h.do("POST", p+"/connect", ``).errBody(t, 400)
	h.do("POST", p+"/connect", `{}`).errBody(t, 400)
	h.do("POST", p+"/connect", `{"timeout":"x"}`).errBody(t, 400)
	h.do("POST", p+"/resume", `{}`).errBody(t, 409)
	if r := h.do("POST", p+"/timeout", `{"timeout":120}`); r.status != 204 {
		t.Fatalf("timeout %d %s", r.status, r.body)
	}
	h.do("POST", p+"/timeout", `{}`).errBody(t, 400)
	h.do("POST", p+"/timeout", ``).errBody(t, 400)
	h.do("POST", p+"/timeout", `{"timeout":7201}`).errBody(t, 400)
	if r := h.do("POST", p+"/refreshes", ``); r.status != 204 {
		t.Fatalf("refresh %d", r.status)
	}
	h.do("POST", p+"/refreshes", `{"duration":3601}`).errBody(t, 400)
	if r := h.do("POST", p+"/pause", ``); r.status != 204 {
		t.Fatalf("pause %d %s", r.status, r.body)
	}
	h.do("POST", p+"/pause", `{}`).errBody(t, 409)
	h.do("POST", p+"/pause", `[`).errBody(t, 400)
	var d map[string]any
	h.do("GET", p, "").json(t, &d)
	if d["state"] != "paused" {
		t.Fatalf("state %v", d["state"])
	}
	if r := h.do("GET", p+"/metrics", ""); r.status != 200 || string(r.body) != "[]\n" {
		t.Fatalf("paused metrics %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/v2"+p+"/connect", ``); r.status != 201 {
		t.Fatalf("connect paused %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/v2"+p+"/connect", `{}`); r.status != 200 {
		t.Fatalf("v2 connect running %d", r.status)
	}
	// memory: false pauses to the files; connect resumes it (201).
	if r := h.do("POST", p+"/pause", `{"memory":false}`); r.status != 204 {
		t.Fatalf("filesystem-only pause %d %s", r.status, r.body)
	}
	h.do("POST", p+"/pause", `{"memory":"no"}`).errBody(t, 400)
	if r := h.do("POST", "/v2"+p+"/connect", `{"timeout":30}`); r.status != 201 {
		t.Fatalf("connect after a filesystem-only pause %d %s", r.status, r.body)
	}
	_ = h.do("POST", p+"/pause", ``)
	if r := h.do("POST", p+"/resume", `{"timeout":30}`); r.status != 201 {
		t.Fatalf("resume %d %s", r.status, r.body)
	}
	// A range that ends before the sandbox existed has no readings; one
	// open at its end has the one taken now; bounds are checked.
	if r := h.do("GET", p+"/metrics?start=1&end=2", ""); r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("metrics of 1970: %d %s", r.status, r.body)
	}
	for _, q := range []string{"start=x", "end=-1", "start=99999999999999", "start=20&end=10"} {
		h.do("GET", p+"/metrics?"+q, "").errBody(t, 400)
	}
	r := h.do("GET", p+"/metrics?start="+strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10), "")
	var ms []map[string]any
	r.json(t, &ms)
	if r.status != 200 || len(ms) != 1 {
		t.Fatalf("metrics %d %s", r.status, r.body)
	}
	for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal"} {
		if _, ok := ms[0][k]; !ok {
			t.Fatalf("metric lacks %s", k)
		}
	}
	h.do("GET", p+"/metrics?start=abc", "").errBody(t, 400)
	if r := h.do("DELETE", p, ""); r.status != 204 {
		t.Fatalf("kill %d", r.status)
	}
	h.do("DELETE", p, "").errBody(t, 404)
	h.do("GET", p, "").errBody(t, 404)
}

func TestUnknownRouteAndMethod(t *testing.T) {
	h := newHarness(t)
	h.do("GET", "/nope", "").errBody(t, 404)
	h.do("PUT", "/v2/sandboxes", "").errBody(t, 405)
	h.do("PUT", "/sandboxes/iabc/network", "{}").errBody(t, 404)
	h.do("GET", "/sandboxes/metrics", "").errBody(t, 501)
	h.doKey("PUT", "/sandboxes/iabc/network", "{}", "").errBody(t, 401)
}

func TestTemplates(t *testing.T) {
	h := newHarness(t)
	for _, p := range []string{"/templates", "/v2/templates"} {
		var ts []map[string]any
		h.do("GET", p, "").json(t, &ts)
		if len(ts) != 1 {
			t.Fatalf("%s: %v", p, ts)
		}
		for _, k := range []string{"templateID", "buildID", "cpuCount", "memoryMB", "diskSizeMB", "public", "createdAt",
			"updatedAt", "createdBy", "lastSpawnedAt", "spawnCount", "buildCount", "envdVersion", "aliases", "names", "buildStatus"} {
			if _, ok := ts[0][k]; !ok {
				t.Fatalf("template lacks %s", k)
			}
		}
	}
}

// TestTemplateTags: GET /templates/{id}/tags (the SDK's getTags) lists
// E2B's implicit "default" tag on the template's build, by ID or name;
// an unknown template is 404; assigning tags is 501.
func TestTemplateTags(t *testing.T) {
	h := newHarness(t)
	var ts []struct{ TemplateID, BuildID string }
	h.do("GET", "/templates", "").json(t, &ts)
	for _, ref := range []string{ts[0].TemplateID, "base"} {
		var tags []struct {
			Tag, BuildID string
			CreatedAt    time.Time
		}
		h.do("GET", "/templates/"+ref+"/tags", "").json(t, &tags)
		if len(tags) != 1 || tags[0].Tag != "default" || tags[0].BuildID != ts[0].BuildID {
			t.Fatalf("%s tags: %+v", ref, tags)
		}
	}
	h.do("GET", "/templates/nope/tags", "").errBody(t, 404)
	h.do("GET", "/templates/base/other", "").errBody(t, 404)
	h.do("GET", "/templates/aliases/nope", "").errBody(t, 404)
	h.doKey("GET", "/templates/base/tags", "", "").errBody(t, 401)
	h.do("POST", "/templates/tags", `{"target":"base:default","tags":["v1"]}`).errBody(t, 501)
}

// seedList inserts s0..s4 (s2 paused; even ones carry {"a b":"c&d"}).
func seedList(t *testing.T, h *harness) time.Time {
	t.Helper()
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).UTC()
	for i, st := range []store.State{"running", "running", "paused", "running", "running"} {
		md := map[string]string{"n": string(rune('a' + i))}
		if i%2 == 0 {
			md["a b"] = "c&d"
		}
		err := h.env.DB.InsertSandbox(ctx, store.Sandbox{ID: "s" + string(rune('0'+i)), Team: store.DefaultTeam, TemplateID: "tplbase", Alias: "base",
			State: st, StartedAt: base.Add(time.Duration(i) * time.Minute), EndAt: base.Add(time.Hour), Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
	}
	return base
}

func listIDs(t *testing.T, r resp) string {
	t.Helper()
	var ls []map[string]any
	r.json(t, &ls)
	var out []string
	for _, l := range ls {
		out = append(out, l["sandboxID"].(string))
	}
	return strings.Join(out, ",")
}

func TestList(t *testing.T) {
	h := newHarness(t)
	base := seedList(t, h)
	ids := func(r resp) string { return listIDs(t, r) }
	tests := []struct {
		query, want, running string
	}{
		{"", "s4,s3,s2,s1,s0", "4"},
		{"?state=running", "s4,s3,s1,s0", "4"},
		{"?state=paused", "s2", ""},
		{"?order=asc", "s0,s1,s2,s3,s4", "4"},
		{"?metadata=a%252520b%3Dc%252526d", "s4,s2,s0", "2"},
		{"?metadata=n%3Db", "s1", "1"},
		{"?template=base&state=running,paused", "s4,s3,s2,s1,s0", "4"},
		{"?template=other", "", "0"},
		{"?startedAfter=" + url.QueryEscape(base.Add(3*time.Minute).Format(time.RFC3339Nano)), "s4,s3", "2"},
		{"?limit=500", "s4,s3,s2,s1,s0", "4"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			r := h.do("GET", "/v2/sandboxes"+tt.query, "")
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if got := ids(r); got != tt.want {
				t.Fatalf("got %s want %s", got, tt.want)
			}
			if got := r.header.Get("X-Total-Running"); got != tt.running {
				t.Fatalf("X-Total-Running %q want %q", got, tt.running)
			}
			if r.header.Get("X-Next-Token") != "" {
				t.Fatal("unexpected next token")
			}
		})
	}
	// v1 list: running only.
	if got := ids(h.do("GET", "/sandboxes?metadata=a%252520b%3Dc%252526d", "")); got != "s4,s0" {
		t.Fatalf("v1 list %s", got)
	}
}

func TestListPagination(t *testing.T) {
	h := newHarness(t)
	seedList(t, h)
	ids := func(r resp) string { return listIDs(t, r) }
	for _, order := range []string{"desc", "asc"} {
		var all []string
		tok := ""
		for range 10 {
			q := "?limit=2&order=" + order
			if tok != "" {
				q += "&nextToken=" + url.QueryEscape(tok)
			}
			r := h.do("GET", "/v2/sandboxes"+q, "")
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if s := ids(r); s != "" {
				all = append(all, s)
			}
			if tok = r.header.Get("X-Next-Token"); tok == "" {
				break
			}
			if order == "desc" {
				h.do("GET", "/v2/sandboxes?order=asc&nextToken="+url.QueryEscape(tok), "").errBody(t, 400)
			}
		}
		want := map[string]string{"desc": "s4,s3,s2,s1,s0", "asc": "s0,s1,s2,s3,s4"}[order]
		if got := strings.Join(all, ","); got != want {
			t.Fatalf("%s pages %s", order, got)
		}
	}
}

func TestListBadQueries(t *testing.T) {
	h := newHarness(t)
	for _, q := range []string{"?state=dead", "?order=up", "?startedAfter=yesterday", "?template=base:v1", "?limit=x",
		"?nextToken=***", "?nextToken=Zm9v", "?metadata=a", "?metadata=a%3Db%3Dc", "?metadata=%25zz"} {
		msg := h.do("GET", "/v2/sandboxes"+q, "").errBody(t, 400)
		if strings.Contains(q, "nextToken") && msg != "Invalid next token" {
			t.Fatalf("%s: %q", q, msg)
		}
	}
	h.do("GET", "/sandboxes?metadata=x", "").errBody(t, 400)
}

func TestShortID(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"iabc", "iabc", true}, {"iabc-6532622b", "iabc", true}, {"a-b-c", "", false},
		{"", "", false}, {"-x", "", false}, {"ABC", "", false}, {"a.b", "", false},
	}
	for _, tt := range tests {
		got, err := server.ShortID(tt.in)
		if (err == nil) != tt.ok || got != tt.want || (err != nil && !errdefs.IsNotFound(err)) {
			t.Errorf("ShortID(%q) = %q, %v (want a not-found error)", tt.in, got, err)
		}
	}
}

func TestPanicBecomes500JSON(t *testing.T) {
	h := newHarness(t)
	// A server without an orchestrator panics in every sandbox handler.
	broken := httptest.NewServer(server.New(server.Config{Store: h.env.DB}))
	defer broken.Close()
	h.url = broken.URL
	h.do("GET", "/sandboxes/iabc", "").errBody(t, 500)
}

// TestBadTimeoutsAndEnvs: zero and negative timeouts answer 400 on every
// route that takes one, and environments no command could start with are
// refused at create; the sandbox is left as it was.
func TestBadTimeoutsAndEnvs(t *testing.T) {
	h := newHarness(t)
	id := h.create(`{"templateID":"base"}`)["sandboxID"].(string)
	p := "/sandboxes/" + id
	for _, tc := range []struct{ method, path, body, msg string }{
		{"POST", p + "/timeout", `{"timeout":-1}`, "greater than 0"},
		{"POST", p + "/timeout", `{"timeout":0}`, "greater than 0"},
		{"POST", p + "/connect", `{"timeout":-1}`, "greater than 0"},
		{"POST", "/v2" + p + "/connect", `{"timeout":0}`, "greater than 0"},
		{"POST", p + "/resume", `{"timeout":-5}`, "greater than 0"},
		{"POST", p + "/fork", `{"timeout":-5}`, "greater than 0"},
		{"POST", p + "/refreshes", `{"duration":-1}`, "between 0"},
		{"POST", "/v2/sandboxes", `{"templateID":"base","envVars":{"":"x"}}`, "name is empty"},
		{"POST", "/v2/sandboxes", `{"templateID":"base","envVars":{"A=B":"x"}}`, "contains '='"},
		{"POST", "/v2/sandboxes", `{"templateID":"base","envVars":{"A":"x\u0000"}}`, "contains NUL"},
		{"POST", "/v2/sandboxes", `{"templateID":"base","envVars":{"BIG":"` + strings.Repeat("v", 900<<10) + `"}}`, "execve"},
	} {
		t.Run(tc.path+tc.body[:min(len(tc.body), 40)], func(t *testing.T) {
			if msg := h.do(tc.method, tc.path, tc.body).errBody(t, 400); !strings.Contains(msg, tc.msg) {
				t.Fatalf("message %q lacks %q", msg, tc.msg)
			}
		})
	}
	var d map[string]any
	h.do("GET", p, "").json(t, &d)
	if d["state"] != "running" {
		t.Fatalf("sandbox state %v after rejected calls", d["state"])
	}
	if n := h.env.Runtime.Count(); n != 1 {
		t.Fatalf("%d sandboxes, want 1", n)
	}
}
