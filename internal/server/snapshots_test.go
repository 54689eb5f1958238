package server_test

import (
	"testing"
)

func TestSnapshotEndpoints(t *testing.T) {
	h := newHarness(t)
	src := h.create(`{"templateID":"base","envVars":{"FROM":"src"}}`)["sandboxID"].(string)

	r := h.do("POST", "/sandboxes/"+src+"/snapshots", `{"name":"team/app:v1"}`)
	if r.status != 201 {
		t.Fatalf("create snapshot %d %s", r.status, r.body)
	}
	var snap struct {
		SnapshotID string   `json:"snapshotID"`
		Names      []string `json:"names"`
	}
	r.json(t, &snap)
	if snap.SnapshotID == "" || len(snap.Names) != 1 || snap.Names[0] != "team/app:v1" {
		t.Fatalf("snapshot body %s", r.body)
	}
	if !h.env.Runtime.HasSnapshot(snap.SnapshotID) {
		t.Fatal("runtime has no snapshot")
	}
	// An empty body works too (the SDK sends {}), and names are unique.
	if r := h.do("POST", "/sandboxes/"+src+"/snapshots", `{}`); r.status != 201 {
		t.Fatalf("unnamed snapshot %d %s", r.status, r.body)
	}
	h.do("POST", "/sandboxes/"+src+"/snapshots", `{"name":"team/app:v1"}`).errBody(t, 409)

	// Sandboxes start from a snapshot by ID or name and inherit its env.
	for _, ref := range []string{snap.SnapshotID, "team/app:v1"} {
		m := h.create(`{"templateID":"` + ref + `","envVars":{"MINE":"1"}}`)
		id := m["sandboxID"].(string)
		if m["templateID"] != "tplbase" {
			t.Fatalf("fork of %s: %v", ref, m)
		}
		in, _ := h.env.Runtime.Init(id)
		if in.EnvVars["FROM"] != "src" || in.EnvVars["MINE"] != "1" {
			t.Fatalf("fork env %+v", in.EnvVars)
		}
	}

	var list []map[string]any
	r = h.do("GET", "/snapshots?sandboxID="+src+"&limit=1", "")
	r.json(t, &list)
	if r.status != 200 || len(list) != 1 || r.header.Get("X-Next-Token") == "" {
		t.Fatalf("list page 1: %d %s %v", r.status, r.body, r.header)
	}
	r = h.do("GET", "/snapshots?sandboxID="+src+"&nextToken="+r.header.Get("X-Next-Token"), "")
	r.json(t, &list)
	if r.status != 200 || len(list) != 1 || r.header.Get("X-Next-Token") != "" {
		t.Fatalf("list page 2: %d %s", r.status, r.body)
	}
	r = h.do("GET", "/snapshots?name=team/app:v1", "")
	r.json(t, &list)
	if len(list) != 1 || list[0]["snapshotID"] != snap.SnapshotID {
		t.Fatalf("list by name %s", r.body)
	}

	if r := h.do("DELETE", "/templates/"+snap.SnapshotID, ""); r.status != 204 {
		t.Fatalf("delete %d %s", r.status, r.body)
	}
	if h.env.Runtime.HasSnapshot(snap.SnapshotID) {
		t.Fatal("runtime kept the snapshot")
	}
	h.do("DELETE", "/templates/"+snap.SnapshotID, "").errBody(t, 404)
	h.do("POST", "/v2/sandboxes", `{"templateID":"`+snap.SnapshotID+`"}`).errBody(t, 404)
	h.do("DELETE", "/templates/base", "").errBody(t, 501)
}

func TestSnapshotErrors(t *testing.T) {
	h := newHarness(t)
	id := h.create(`{"templateID":"base"}`)["sandboxID"].(string)
	for _, tc := range []struct {
		name, path, body string
		status           int
	}{
		{"unknown sandbox", "/sandboxes/inope/snapshots", `{}`, 404},
		{"bad json", "/sandboxes/" + id + "/snapshots", `{"name":`, 400},
		{"wrong type", "/sandboxes/" + id + "/snapshots", `{"name":5}`, 400},
		{"empty name", "/sandboxes/" + id + "/snapshots", `{"name":""}`, 400},
		{"bad name", "/sandboxes/" + id + "/snapshots", `{"name":"a b"}`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.do("POST", tc.path, tc.body).errBody(t, tc.status)
		})
	}
	if r := h.do("POST", "/sandboxes/"+id+"/pause", ""); r.status != 204 {
		t.Fatalf("pause %d", r.status)
	}
	h.do("POST", "/sandboxes/"+id+"/snapshots", `{}`).errBody(t, 409)
	h.do("GET", "/snapshots?limit=0", "").errBody(t, 400)
	h.do("GET", "/snapshots?limit=x", "").errBody(t, 400)
	h.doKey("GET", "/snapshots", "", "").errBody(t, 401)
}

func TestAutoResumeFlag(t *testing.T) {
	h := newHarness(t)
	h.do("POST", "/v2/sandboxes", `{"templateID":"base","autoResume":{"enabled":true}}`).errBody(t, 400)
	h.do("POST", "/v2/sandboxes", `{"templateID":"base","autoPause":true,"autoResume":{}}`).errBody(t, 400)
	// A filesystem-only auto-pause is never resumed by traffic (E2B's SDK refuses it too).
	h.do("POST", "/v2/sandboxes", `{"templateID":"base","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}`).errBody(t, 400)
	id := h.create(`{"templateID":"base","autoPause":true,"autoResume":{"enabled":true}}`)["sandboxID"].(string)
	var d map[string]any
	h.do("GET", "/sandboxes/"+id, "").json(t, &d)
	lc := d["lifecycle"].(map[string]any)
	if lc["autoResume"] != true || lc["onTimeout"] != "pause" {
		t.Fatalf("lifecycle %v", lc)
	}
}

func TestFork(t *testing.T) {
	h := newHarness(t)
	src := h.create(`{"templateID":"base","envVars":{"FROM":"src"},"metadata":{"k":"v"}}`)["sandboxID"].(string)
	r := h.do("POST", "/sandboxes/"+src+"/fork", `{"count":3,"timeout":60}`)
	if r.status != 201 {
		t.Fatalf("fork %d %s", r.status, r.body)
	}
	var res []struct {
		Sandbox *struct {
			SandboxID string `json:"sandboxID"`
		} `json:"sandbox"`
		Error *struct{ Code int } `json:"error"`
	}
	r.json(t, &res)
	if len(res) != 3 {
		t.Fatalf("results %s", r.body)
	}
	seen := map[string]bool{}
	for _, x := range res {
		if x.Sandbox == nil || x.Error != nil || seen[x.Sandbox.SandboxID] || x.Sandbox.SandboxID == src {
			t.Fatalf("result %s", r.body)
		}
		seen[x.Sandbox.SandboxID] = true
		if in, _ := h.env.Runtime.Init(x.Sandbox.SandboxID); in.EnvVars["FROM"] != "src" {
			t.Fatalf("fork env %+v", in.EnvVars)
		}
	}
	// The fork's snapshot is gone afterwards; the source still runs.
	var list []map[string]any
	h.do("GET", "/snapshots", "").json(t, &list)
	if len(list) != 0 {
		t.Fatalf("snapshots left: %v", list)
	}
	if r := h.do("GET", "/sandboxes/"+src, ""); r.status != 200 {
		t.Fatalf("source %d", r.status)
	}
	// Defaults: one fork.
	if r := h.do("POST", "/sandboxes/"+src+"/fork", ``); r.status != 201 {
		t.Fatalf("default fork %d %s", r.status, r.body)
	}
	h.do("POST", "/sandboxes/"+src+"/fork", `{"count":0}`).errBody(t, 400)
	h.do("POST", "/sandboxes/"+src+"/fork", `{"count":101}`).errBody(t, 400)
	h.do("POST", "/sandboxes/"+src+"/fork", `{"timeout":-1}`).errBody(t, 400)
	h.do("POST", "/sandboxes/inope/fork", `{}`).errBody(t, 404)
}
