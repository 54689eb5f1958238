package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/server/templateapi"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
	"github.com/moatsh/moat/internal/testkit"
)

// newBuildHarness is a server with template builds on, a shared template
// "mini" with a real (tiny) rootfs, and a clock tests can move.
func newBuildHarness(t *testing.T) (*harness, *atomic.Int64) {
	t.Helper()
	h, now, _ := newBuildHarnessConfig(t)
	return h, now
}

// newBuildHarnessConfig is newBuildHarness that also returns the build
// configuration (its DataDir, its upload GC).
func newBuildHarnessConfig(t *testing.T) (*harness, *atomic.Int64, *server.BuildConfig) {
	t.Helper()
	testkit.RequireRoot(t) // builds chown /home/user
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{MaxTimeout: time.Hour})
	key, err := env.DB.CreateAPIKey(ctx, store.DefaultTeam)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mini := filepath.Join(dir, "mini")
	if err := os.MkdirAll(filepath.Join(mini, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mini, "etc/passwd"),
		[]byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := env.DB.UpsertTemplate(ctx, store.Template{ID: "mini", Name: "mini", RootfsDir: mini}); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	envd := filepath.Join(dir, "envd")
	if err := os.WriteFile(envd, b, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	m, err := build.New(ctx, build.Config{DB: env.DB, DataDir: data, EnvdPath: envd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	var now atomic.Int64
	now.Store(time.Now().Unix())
	bc := &server.BuildConfig{Manager: m, DataDir: data, Now: func() time.Time { return time.Unix(now.Load(), 0) }}
	ts := httptest.NewServer(server.New(server.Config{Store: env.DB, Orch: env.Orch, Builds: bc}))
	t.Cleanup(ts.Close)
	return &harness{t: t, url: ts.URL, key: key, env: env}, &now, bc
}

type buildIDs struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Names      []string `json:"names"`
	Aliases    []string `json:"aliases"`
	Tags       []string `json:"tags"`
}

func (h *harness) requestBuild(key, name string) buildIDs {
	h.t.Helper()
	r := h.doKey("POST", "/v3/templates", fmt.Sprintf(`{"name":%q,"cpuCount":2,"memoryMB":1024}`, name), key)
	if r.status != http.StatusAccepted {
		h.t.Fatalf("request build: %d %s", r.status, r.body)
	}
	var ids buildIDs
	r.json(h.t, &ids)
	if ids.TemplateID == "" || ids.BuildID == "" || len(ids.Names) != 1 || ids.Names[0] != name || ids.Tags == nil {
		h.t.Fatalf("request build: %s", r.body)
	}
	return ids
}

type buildInfo struct {
	Status     string `json:"status"`
	LogEntries []struct {
		Timestamp time.Time `json:"timestamp"`
		Level     string    `json:"level"`
		Message   string    `json:"message"`
	} `json:"logEntries"`
	Logs   []string `json:"logs"`
	Reason *struct {
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"reason"`
}

// waitBuild polls the status route as the SDK does (logsOffset advancing
// by what it got) and returns the final status and every log message.
func (h *harness) waitBuild(key string, ids buildIDs) (buildInfo, []string) {
	h.t.Helper()
	var msgs []string
	var info buildInfo
	testkit.WaitFor(h.t, 30*time.Second, "the build to finish and its logs to be read", func() bool {
		r := h.doKey("GET", fmt.Sprintf("/templates/%s/builds/%s/status?logsOffset=%d", ids.TemplateID, ids.BuildID, len(msgs)), "", key)
		if r.status != http.StatusOK {
			h.t.Fatalf("status: %d %s", r.status, r.body)
		}
		info = buildInfo{}
		r.json(h.t, &info)
		for _, e := range info.LogEntries {
			if e.Timestamp.IsZero() || e.Level == "" {
				h.t.Fatalf("log entry %+v", e)
			}
			msgs = append(msgs, e.Message)
		}
		if info.Logs == nil {
			h.t.Fatalf("logs is not an array: %s", r.body)
		}
		return (info.Status == "ready" || info.Status == "error") && len(info.LogEntries) == 0
	})
	return info, msgs
}

// TestTemplateBuildFlow: the SDK's sequence for a fromTemplate build with
// ENV/WORKDIR/USER, then a sandbox from the alias gets the env, workdir
// and user in envd's /init; the template, its builds and its alias are
// invisible to another team; delete removes it.
func TestTemplateBuildFlow(t *testing.T) {
	h, _, bc := newBuildHarnessConfig(t)
	keyB := h.keyFor("b")
	ids := h.requestBuild(h.key, "my-tpl")
	r := h.do("POST", "/v2/templates/"+ids.TemplateID+"/builds/"+ids.BuildID, `{"fromTemplate":"mini","force":false,
		"steps":[{"type":"ENV","args":["A","1","B","two"],"force":false},{"type":"WORKDIR","args":["/tmp"]},{"type":"USER","args":["root"]}]}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/v2/templates/"+ids.TemplateID+"/builds/"+ids.BuildID, `{"fromTemplate":"mini"}`); r.status != 400 {
		t.Fatalf("second start: %d %s", r.status, r.body)
	}
	info, msgs := h.waitBuild(h.key, ids)
	if info.Status != "ready" || info.Reason != nil {
		t.Fatalf("build: %+v %v", info, msgs)
	}
	if all := strings.Join(msgs, "\n"); !strings.Contains(all, "[1/3] ENV A 1 B two") || !strings.Contains(all, "build finished") {
		t.Fatalf("logs:\n%s", all)
	}

	// The alias resolves for its team only.
	r = h.do("GET", "/templates/aliases/my-tpl", "")
	var alias struct {
		TemplateID string `json:"templateID"`
		Public     bool   `json:"public"`
	}
	if r.status != 200 {
		t.Fatalf("alias: %d %s", r.status, r.body)
	}
	if r.json(t, &alias); alias.TemplateID != ids.TemplateID || alias.Public {
		t.Fatalf("alias: %s", r.body)
	}
	if r := h.do("GET", "/templates/aliases/mini", ""); r.status != 200 || !strings.Contains(string(r.body), `"public":true`) {
		t.Fatalf("shared alias: %d %s", r.status, r.body)
	}
	h.doKey("GET", "/templates/aliases/my-tpl", "", keyB).errBody(t, 404)
	h.do("GET", "/templates/aliases/nope", "").errBody(t, 404)

	// Create from the alias: envd's /init carries the template's config,
	// the create's own envVars win.
	sb := h.create(`{"templateID":"my-tpl","envVars":{"B":"mine"}}`)
	id := sb["sandboxID"].(string)
	if sb["templateID"] != ids.TemplateID {
		t.Fatalf("sandbox: %v", sb)
	}
	in, ok := h.env.Runtime.Init(id)
	if !ok || in.EnvVars["A"] != "1" || in.EnvVars["B"] != "mine" || in.DefaultWorkdir != "/tmp" || in.DefaultUser != "root" {
		t.Fatalf("init = %+v", in)
	}
	// A sandbox of a shared template keeps envd's defaults.
	sb2 := h.create(`{"templateID":"base"}`)
	if in, _ := h.env.Runtime.Init(sb2["sandboxID"].(string)); in.DefaultUser != "user" || in.DefaultWorkdir != "/home/user" {
		t.Fatalf("init of base = %+v", in)
	}
	// Another team can neither start nor see it.
	h.doKey("POST", "/v2/sandboxes", `{"templateID":"my-tpl"}`, keyB).errBody(t, 404)
	h.doKey("POST", "/v2/sandboxes", `{"templateID":"`+ids.TemplateID+`"}`, keyB).errBody(t, 404)
	for _, c := range []struct {
		key  string
		want bool
	}{{h.key, true}, {keyB, false}} {
		r := h.doKey("GET", "/templates", "", c.key)
		if got := strings.Contains(string(r.body), ids.TemplateID); r.status != 200 || got != c.want ||
			!strings.Contains(string(r.body), `"mini"`) {
			t.Fatalf("list (own %v): %d %s", c.want, r.status, r.body)
		}
	}
	h.doKey("GET", "/templates/"+ids.TemplateID+"/builds/"+ids.BuildID+"/status", "", keyB).errBody(t, 404)
	h.doKey("DELETE", "/templates/"+ids.TemplateID, "", keyB).errBody(t, 404)

	// GET /templates/{id}: the template with its builds, for its team only.
	r = h.do("GET", "/templates/"+ids.TemplateID, "")
	var twb struct {
		TemplateID string   `json:"templateID"`
		Names      []string `json:"names"`
		Builds     []struct {
			BuildID string `json:"buildID"`
			Status  string `json:"status"`
		} `json:"builds"`
	}
	if r.status != 200 {
		t.Fatalf("get template: %d %s", r.status, r.body)
	}
	if r.json(t, &twb); twb.TemplateID != ids.TemplateID || len(twb.Builds) != 1 || twb.Builds[0].Status != "ready" || twb.Names[0] != "my-tpl" {
		t.Fatalf("get template: %s", r.body)
	}
	h.doKey("GET", "/templates/"+ids.TemplateID, "", keyB).errBody(t, 404)
	if r := h.do("GET", "/templates/base", ""); r.status != 200 || !strings.Contains(string(r.body), `"public":true`) {
		t.Fatalf("get shared template: %d %s", r.status, r.body)
	}

	// A second build of the name keeps the template ID.
	if again := h.requestBuild(h.key, "my-tpl"); again.TemplateID != ids.TemplateID || again.BuildID == ids.BuildID {
		t.Fatalf("rebuild ids %+v vs %+v", again, ids)
	}
	// A build requested without cpuCount and memoryMB reports the
	// defaults its sandboxes get (the console showed 0 and 0 MB).
	if r := h.do("POST", "/v3/templates", `{"name":"my-tpl"}`); r.status != http.StatusAccepted {
		t.Fatalf("request build without resources: %d %s", r.status, r.body)
	}
	var sized struct {
		Builds []struct {
			CPUCount int `json:"cpuCount"`
			MemoryMB int `json:"memoryMB"`
		} `json:"builds"`
	}
	h.do("GET", "/templates/"+ids.TemplateID, "").json(t, &sized)
	if n := len(sized.Builds); n != 3 || sized.Builds[0].CPUCount != orchestrator.DefaultVCPUs ||
		sized.Builds[0].MemoryMB != orchestrator.DefaultMemoryMiB || sized.Builds[n-1].CPUCount != 2 || sized.Builds[n-1].MemoryMB != 1024 {
		t.Fatalf("builds' resources (newest first): %+v", sized.Builds)
	}
	if r := h.do("DELETE", "/templates/"+ids.TemplateID, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	h.do("GET", "/templates/aliases/my-tpl", "").errBody(t, 404)
	h.do("POST", "/v2/sandboxes", `{"templateID":"my-tpl"}`).errBody(t, 404)
	// Its files stay while its sandbox lives, and go with the next
	// collection once it is gone (app runs template.RemoveOrphans).
	tdir := filepath.Join(bc.DataDir, "templates", "my-tpl")
	if _, err := os.Stat(tdir); err != nil {
		t.Fatalf("deleted template's directory removed under a live sandbox: %v", err)
	}
	if r := h.do("DELETE", "/sandboxes/"+id, ""); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if removed, _, err := template.RemoveOrphans(bc.DataDir, map[string]bool{"mini": true}, 0, nil); err != nil ||
		len(removed) != 1 || removed[0] != "my-tpl" {
		t.Fatalf("orphans removed %v, %v", removed, err)
	}
	if _, err := os.Stat(tdir); !os.IsNotExist(err) {
		t.Fatalf("deleted template's directory: %v", err)
	}
}

// TestTemplateBuildValidation: every route's refusals, with E2B error
// bodies.
func TestTemplateBuildValidation(t *testing.T) {
	h, _ := newBuildHarness(t)
	keyB := h.keyFor("b")
	ids := h.requestBuild(h.key, "val")
	start := "/v2/templates/" + ids.TemplateID + "/builds/" + ids.BuildID
	hash := strings.Repeat("ab", 32)
	tests := []struct {
		name, method, path, body string
		key                      string // "" = the default team's
		status                   int
		msg                      string
	}{
		{"request: no body", "POST", "/v3/templates", "", "", 400, "body is required"},
		{"request: no name", "POST", "/v3/templates", `{"cpuCount":2}`, "", 400, "name is required"},
		{"request: bad name", "POST", "/v3/templates", `{"name":"My Template"}`, "", 400, "lower-case"},
		{"request: tag in name", "POST", "/v3/templates", `{"name":"x:v1"}`, "", 501, "tags"},
		{"request: tags", "POST", "/v3/templates", `{"name":"x","tags":["v1"]}`, "", 501, "tags"},
		{"request: cpu", "POST", "/v3/templates", `{"name":"x","cpuCount":0}`, "", 400, "cpuCount"},
		{"request: memory", "POST", "/v3/templates", `{"name":"x","memoryMB":64}`, "", 400, "memoryMB"},
		{"request: min free disk", "POST", "/v3/templates", `{"name":"x","minFreeDiskMb":100}`, "", 501, "minFreeDiskMb"},
		{"request: shared alias", "POST", "/v3/templates", `{"name":"base"}`, "", 409, "already taken"},
		{"request: other team's alias", "POST", "/v3/templates", `{"name":"val"}`, "b", 409, "already taken"},
		{"request: other teamID", "POST", "/v3/templates", `{"name":"x","teamID":"b"}`, "", 400, "teamID"},
		{"request: old route", "POST", "/v2/templates", `{"alias":"x"}`, "", 501, "not implemented"},
		{"files: bad hash", "GET", "/templates/" + ids.TemplateID + "/files/xyz", "", "", 400, "hex"},
		{"files: unknown template", "GET", "/templates/nope/files/" + hash, "", "", 404, "not found"},
		{"files: other team", "GET", "/templates/" + ids.TemplateID + "/files/" + hash, "", "b", 404, "not found"},
		{"files: shared template", "GET", "/templates/base/files/" + hash, "", "", 404, "not found"},
		{"start: unknown build", "POST", "/v2/templates/" + ids.TemplateID + "/builds/nope", `{"fromTemplate":"mini"}`, "", 404, "not found"},
		{"start: unknown template", "POST", "/v2/templates/nope/builds/" + ids.BuildID, `{"fromTemplate":"mini"}`, "", 404, "not found"},
		{"start: other team", "POST", start, `{"fromTemplate":"mini"}`, "b", 404, "not found"},
		{"start: no base", "POST", start, `{"steps":[]}`, "", 400, "fromImage or fromTemplate"},
		{"start: both bases", "POST", start, `{"fromTemplate":"mini","fromImage":"x"}`, "", 400, "exclusive"},
		{"start: base missing", "POST", start, `{"fromTemplate":"nope"}`, "", 400, "'nope' not found"},
		{"start: unknown step", "POST", start, `{"fromTemplate":"mini","steps":[{"type":"ADD","args":["x"]}]}`, "", 400, `unknown step type "ADD"`},
		{"start: bad env", "POST", start, `{"fromTemplate":"mini","steps":[{"type":"ENV","args":["A"]}]}`, "", 400, "step 1 (ENV)"},
		{"start: run", "POST", start, `{"fromTemplate":"mini","steps":[{"type":"ENV","args":["A","1"]},{"type":"RUN","args":["false"]}]}`, "", 501, "step 2 (RUN)"},
		{"start: copy never uploaded", "POST", start, `{"fromTemplate":"mini","steps":[{"type":"COPY","args":["a","/a","",""],"filesHash":"` + hash + `"}]}`, "", 400, "files " + hash + " were never uploaded"},
		{"start: copy bad hash", "POST", start, `{"fromTemplate":"mini","steps":[{"type":"COPY","args":["a","/a"],"filesHash":"zz"}]}`, "", 400, "filesHash"},
		{"start: aws registry", "POST", start, `{"fromImage":"x","fromImageRegistry":{"type":"aws","awsAccessKeyId":"a"}}`, "", 501, `type "aws"`},
		{"start: registry no password", "POST", start, `{"fromImage":"x","fromImageRegistry":{"type":"registry","username":"u"}}`, "", 400, "password"},
		{"start: bad JSON", "POST", start, `{"steps":{}}`, "", 400, "steps"},
		{"status: bad offset", "GET", "/templates/" + ids.TemplateID + "/builds/" + ids.BuildID + "/status?logsOffset=-1", "", "", 400, "logsOffset"},
		{"status: bad level", "GET", "/templates/" + ids.TemplateID + "/builds/" + ids.BuildID + "/status?level=loud", "", "", 400, "level"},
		{"status: other team", "GET", "/templates/" + ids.TemplateID + "/builds/" + ids.BuildID + "/status", "", "b", 404, "not found"},
		{"status: unknown", "GET", "/templates/nope/builds/nope/status", "", "", 404, "not found"},
		{"delete: unknown", "DELETE", "/templates/nope", "", "", 404, "not found"},
		{"delete: shared", "DELETE", "/templates/base", "", "", 501, "moat template"},
		{"tags: not implemented", "POST", "/templates/tags", `{}`, "", 501, "not implemented"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := h.key
			if tt.key == "b" {
				key = keyB
			}
			r := h.doKey(tt.method, tt.path, tt.body, key)
			if msg := r.errBody(t, tt.status); !strings.Contains(msg, tt.msg) {
				t.Fatalf("message %q lacks %q", msg, tt.msg)
			}
		})
	}
	// None of the refused starts started the build.
	if r := h.do("GET", "/templates/"+ids.TemplateID+"/builds/"+ids.BuildID+"/status", ""); !strings.Contains(string(r.body), `"status":"waiting"`) {
		t.Fatalf("status after refusals: %s", r.body)
	}
}

// TestTemplateUploads: the files route hands out a signed URL on the API's
// origin; the upload works without an API key, only for the signed hash,
// team and time, and then the team (only) sees the files as present.
func TestTemplateUploads(t *testing.T) {
	h, now, bc := newBuildHarnessConfig(t)
	keyB := h.keyFor("b")
	ids := h.requestBuild(h.key, "up")
	content := "tar bytes"
	sum := sha256.Sum256([]byte("COPY a /a"))
	hash := hex.EncodeToString(sum[:])
	link := func(key, tid string) (present bool, u string) {
		t.Helper()
		r := h.doKey("GET", "/templates/"+tid+"/files/"+hash, "", key)
		if r.status != http.StatusCreated {
			t.Fatalf("files: %d %s", r.status, r.body)
		}
		var out struct {
			Present bool   `json:"present"`
			URL     string `json:"url"`
		}
		r.json(t, &out)
		return out.Present, out.URL
	}
	present, raw := link(h.key, ids.TemplateID)
	if present || !strings.HasPrefix(raw, h.url+templateapi.UploadPathPrefix+hash+"?") {
		t.Fatalf("link: %v %s", present, raw)
	}
	put := func(u, body string) resp {
		t.Helper()
		req, _ := http.NewRequest("PUT", u, strings.NewReader(body))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b strings.Builder
		_, _ = fmt.Fprint(&b, "")
		buf := make([]byte, 4096)
		n, _ := res.Body.Read(buf)
		return resp{status: res.StatusCode, header: res.Header, body: buf[:n]}
	}
	tamper := func(k, v string) string {
		u, _ := url.Parse(raw)
		q := u.Query()
		q.Set(k, v)
		u.RawQuery = q.Encode()
		return u.String()
	}
	other := strings.Repeat("cd", 32)
	put(tamper("team", "b"), content).errBody(t, 403)
	put(tamper("template", "other"), content).errBody(t, 403)
	put(tamper("expires", "99999999999"), content).errBody(t, 403)
	put(tamper("sig", strings.Repeat("0", 64)), content).errBody(t, 403)
	put(strings.Replace(raw, hash, other, 1), content).errBody(t, 403)
	put(tamper("expires", "soon"), content).errBody(t, 400)
	put(strings.Replace(raw, hash, "nothex", 1), content).errBody(t, 400)
	if r := h.doKey("POST", strings.TrimPrefix(raw, h.url), content, ""); r.status != 405 {
		t.Fatalf("POST upload: %d", r.status)
	}
	// Expired.
	now.Add(2 * 3600)
	put(raw, content).errBody(t, 403)
	now.Add(-2 * 3600)
	// None of the refused uploads left a file.
	if left, _ := filepath.Glob(filepath.Join(bc.DataDir, "build-files", "*", "*")); len(left) != 0 {
		t.Fatalf("refused uploads left files: %v", left)
	}
	// Uploads are not bound by the API's 1 MiB body cap.
	big := strings.Repeat("x", 3*server.MaxBodyBytes)
	if r := put(raw, big); r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if present, _ := link(h.key, ids.TemplateID); !present {
		t.Fatal("uploaded files not present")
	}
	// Team b's store is its own.
	idsB := h.requestBuild(keyB, "up-b")
	if present, _ := link(keyB, idsB.TemplateID); present {
		t.Fatal("b sees a's upload")
	}
	// Present files pass the COPY check, and COPY itself is refused.
	r := h.do("POST", "/v2/templates/"+ids.TemplateID+"/builds/"+ids.BuildID,
		`{"fromTemplate":"mini","steps":[{"type":"COPY","args":["a","/a","",""],"filesHash":"`+hash+`"}]}`)
	if msg := r.errBody(t, 501); !strings.Contains(msg, "step 1 (COPY)") {
		t.Fatalf("copy: %s", msg)
	}
	rb := h.doKey("POST", "/v2/templates/"+idsB.TemplateID+"/builds/"+idsB.BuildID,
		`{"fromTemplate":"mini","steps":[{"type":"COPY","args":["a","/a","",""],"filesHash":"`+hash+`"}]}`, keyB)
	if msg := rb.errBody(t, 400); !strings.Contains(msg, "never uploaded") {
		t.Fatalf("copy of b: %s", msg)
	}
}

// TestTemplateBuildFailure: a build that fails in the background ends in
// status error with the step and a reason, and registers nothing.
func TestTemplateBuildFailure(t *testing.T) {
	h, _ := newBuildHarness(t)
	ids := h.requestBuild(h.key, "bad")
	r := h.do("POST", "/v2/templates/"+ids.TemplateID+"/builds/"+ids.BuildID,
		`{"fromTemplate":"mini","steps":[{"type":"ENV","args":["A","1"]},{"type":"USER","args":["nobody"]}]}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	info, msgs := h.waitBuild(h.key, ids)
	if info.Status != "error" || info.Reason == nil || info.Reason.Step != "2" || !strings.Contains(info.Reason.Message, "USER nobody") {
		t.Fatalf("build: %+v", info)
	}
	if !strings.Contains(strings.Join(msgs, "\n"), "build failed") {
		t.Fatalf("logs: %v", msgs)
	}
	h.do("GET", "/templates/aliases/bad", "").errBody(t, 404)
	h.do("POST", "/v2/sandboxes", `{"templateID":"bad"}`).errBody(t, 404)
}
