package server_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// keyFor makes an API key of team on h's store.
func (h *harness) keyFor(team string) string {
	h.t.Helper()
	key, err := h.env.DB.CreateAPIKey(context.Background(), team)
	if err != nil {
		h.t.Fatal(err)
	}
	return key
}

func (h *harness) createAs(key, body string) map[string]any {
	h.t.Helper()
	r := h.doKey("POST", "/v2/sandboxes", body, key)
	if r.status != http.StatusCreated {
		h.t.Fatalf("create: %d %s", r.status, r.body)
	}
	var m map[string]any
	r.json(h.t, &m)
	return m
}

// TestTeamsCannotSeeEachOther: with team B's key every route on team A's
// sandbox answers exactly what it answers for an unknown ID (status and
// body, the ID aside), lists show only B's own, A's snapshots can be
// neither listed, used nor deleted, and A's sandbox is untouched (A still
// sees and uses it, and its envd token never reaches B).
func TestTeamsCannotSeeEachOther(t *testing.T) {
	h := newHarness(t)
	keyA, keyB := h.keyFor("a"), h.keyFor("b")
	a := h.createAs(keyA, `{"templateID":"base","metadata":{"owner":"shared"}}`)
	idA, tokA := a["sandboxID"].(string), a["envdAccessToken"].(string)
	if tokA == "" {
		t.Fatal("no envd token")
	}
	b := h.createAs(keyB, `{"templateID":"base","metadata":{"owner":"shared"}}`)
	idB := b["sandboxID"].(string)
	r := h.doKey("POST", "/sandboxes/"+idA+"/snapshots", `{"name":"a-snap"}`, keyA)
	if r.status != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	var snap struct{ SnapshotID string }
	r.json(t, &snap)

	const unknown = "i0000000000000000000"
	routes := []struct{ method, path, body string }{
		{"GET", "/sandboxes/%s", ""},
		{"DELETE", "/sandboxes/%s", ""},
		{"POST", "/sandboxes/%s/timeout", `{"timeout":10}`},
		{"POST", "/sandboxes/%s/refreshes", `{}`},
		{"POST", "/sandboxes/%s/pause", ""},
		{"POST", "/sandboxes/%s/resume", `{}`},
		{"POST", "/sandboxes/%s/connect", `{"timeout":10}`},
		{"POST", "/v2/sandboxes/%s/connect", `{"timeout":10}`},
		{"GET", "/sandboxes/%s/metrics", ""},
		{"POST", "/sandboxes/%s/snapshots", `{}`},
		{"POST", "/sandboxes/%s/snapshots", `{"name":"b-snap"}`},
		{"POST", "/sandboxes/%s/fork", `{"count":1,"timeout":60}`},
		// with the SDK 1.x "<id>-<clientID>" form too
		{"GET", "/sandboxes/%s-6532622b", ""},
		{"DELETE", "/sandboxes/%s-6532622b", ""},
	}
	for _, rt := range routes {
		for _, dir := range []struct {
			name, key, id string
		}{{"b on a", keyB, idA}, {"a on b", keyA, idB}} {
			t.Run(dir.name+" "+rt.method+" "+rt.path+" "+rt.body, func(t *testing.T) {
				other := h.doKey(rt.method, strings.Replace(rt.path, "%s", dir.id, 1), rt.body, dir.key)
				none := h.doKey(rt.method, strings.Replace(rt.path, "%s", unknown, 1), rt.body, dir.key)
				other.errBody(t, http.StatusNotFound)
				none.errBody(t, http.StatusNotFound)
				if got, want := string(other.body), strings.ReplaceAll(string(none.body), unknown, dir.id); got != want {
					t.Fatalf("body %s, want %s (as for an unknown ID)", got, want)
				}
				if strings.Contains(string(other.body), tokA) {
					t.Fatal("a's envd token leaked")
				}
			})
		}
	}

	// Lists show only the caller's own, with any filter and on every page.
	lists := []string{
		"/sandboxes", "/sandboxes?metadata=" + url.QueryEscape("owner=shared"),
		"/v2/sandboxes", "/v2/sandboxes?state=running,paused&metadata=" + url.QueryEscape("owner=shared"),
		"/v2/sandboxes?limit=1", "/v2/sandboxes?order=asc&limit=1",
	}
	for _, p := range lists {
		for _, dir := range []struct{ key, own string }{{keyA, idA}, {keyB, idB}} {
			r := h.doKey("GET", p, "", dir.key)
			if got := listIDs(t, r); got != dir.own {
				t.Errorf("GET %s = %q, want only %q", p, got, dir.own)
			}
			if r.header.Get("X-Next-Token") != "" {
				t.Errorf("GET %s: a next page though the team has one sandbox", p)
			}
			if tr := r.header.Get("X-Total-Running"); strings.HasPrefix(p, "/v2") && tr != "" && tr != "1" {
				t.Errorf("GET %s: X-Total-Running %s counts other teams", p, tr)
			}
			if dir.key == keyB && strings.Contains(string(r.body), tokA) {
				t.Errorf("GET %s leaks a's token", p)
			}
		}
	}

	// Snapshots: b sees none of a's, cannot start from or delete them.
	for _, p := range []string{"/snapshots", "/snapshots?sandboxID=" + idA, "/snapshots?name=a-snap"} {
		var list []map[string]any
		r := h.doKey("GET", p, "", keyB)
		r.json(t, &list)
		if r.status != 200 || len(list) != 0 {
			t.Errorf("b: GET %s = %d %s", p, r.status, r.body)
		}
	}
	for _, ref := range []string{snap.SnapshotID, "a-snap"} {
		other := h.doKey("POST", "/v2/sandboxes", `{"templateID":"`+ref+`"}`, keyB)
		none := h.doKey("POST", "/v2/sandboxes", `{"templateID":"nosuchthing"}`, keyB)
		other.errBody(t, 404)
		if got, want := string(other.body), strings.ReplaceAll(string(none.body), "nosuchthing", ref); got != want {
			t.Errorf("create from a's snapshot %s: %s, want %s", ref, got, want)
		}
		other = h.doKey("DELETE", "/templates/"+ref, "", keyB)
		none = h.doKey("DELETE", "/templates/nosuchthing", "", keyB)
		other.errBody(t, 404)
		if got, want := string(other.body), strings.ReplaceAll(string(none.body), "nosuchthing", ref); got != want {
			t.Errorf("delete a's snapshot %s: %s, want %s", ref, got, want)
		}
	}
	// Snapshot names are per team: b may take "a-snap" for its own.
	if r := h.doKey("POST", "/sandboxes/"+idB+"/snapshots", `{"name":"a-snap"}`, keyB); r.status != http.StatusCreated {
		t.Errorf("b's snapshot named like a's: %d %s", r.status, r.body)
	}

	// Templates stay visible to every team.
	for _, key := range []string{keyA, keyB} {
		var ts []map[string]any
		h.doKey("GET", "/templates", "", key).json(t, &ts)
		if len(ts) != 1 || ts[0]["aliases"] == nil {
			t.Errorf("templates: %v", ts)
		}
	}

	// a's sandbox is untouched and a still uses it; a starts from its snapshot.
	var d map[string]any
	r = h.doKey("GET", "/sandboxes/"+idA, "", keyA)
	r.json(t, &d)
	if r.status != 200 || d["state"] != "running" || d["envdAccessToken"] != tokA {
		t.Fatalf("a's sandbox after b's attempts: %d %s", r.status, r.body)
	}
	for _, ref := range []string{snap.SnapshotID, "a-snap"} {
		h.createAs(keyA, `{"templateID":"`+ref+`"}`)
	}
	if r := h.doKey("POST", "/sandboxes/"+idA+"/fork", `{"count":1,"timeout":60}`, keyA); r.status != 201 {
		t.Fatalf("a forks: %d %s", r.status, r.body)
	}
	// a's forks and snapshot sandboxes are a's: b's list still shows only b's.
	if got := listIDs(t, h.doKey("GET", "/v2/sandboxes", "", keyB)); got != idB {
		t.Fatalf("b's list after a's forks: %q", got)
	}
	if r := h.doKey("DELETE", "/sandboxes/"+idA, "", keyA); r.status != 204 {
		t.Fatalf("a kills: %d %s", r.status, r.body)
	}
	// The default team (the harness's key) sees none of this.
	if got := listIDs(t, h.do("GET", "/v2/sandboxes", "")); got != "" {
		t.Fatalf("default team lists %q", got)
	}
	if sb, err := h.env.DB.GetSandbox(context.Background(), idB); err != nil || sb.Team != "b" {
		t.Fatalf("b's sandbox row: %+v, %v", sb, err)
	}
}
