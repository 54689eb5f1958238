package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/volume"
)

// newVolumeHarness is newHarness with volumes under a temporary data dir.
func newVolumeHarness(t *testing.T) (*harness, string) {
	h, dir, _ := newVolumeHarnessM(t)
	return h, dir
}

func newVolumeHarnessM(t *testing.T) (*harness, string, *volume.Manager) {
	t.Helper()
	env := orchestratortest.New(t, orchestrator.Config{MaxTimeout: time.Hour})
	key, err := env.DB.CreateAPIKey(context.Background(), store.DefaultTeam)
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	vols, err := volume.New(data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := vols.Close(); err != nil {
			t.Error(err)
		}
	})
	ts := httptest.NewServer(server.New(server.Config{Store: env.DB, Orch: env.Orch, Volumes: vols, NodeID: "node-h"}))
	t.Cleanup(ts.Close)
	return &harness{t: t, url: ts.URL, key: key, env: env}, filepath.Join(data, "volumes"), vols
}

// TestVolumesCRUD: create answers the volume with a token and makes its
// image of the asked size; names are unique per team (409), bad names and
// sizes 400; list and get show only the team's own; another team's volume
// is 404 to get and delete; delete frees the image.
func TestVolumesCRUD(t *testing.T) {
	h, dir := newVolumeHarness(t)
	keyB := h.keyFor("b")
	r := h.do("POST", "/volumes", `{"name":"data","sizeMB":16}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var v struct {
		VolumeID, Name, Token string
		SizeMB                int
	}
	r.json(t, &v)
	if v.VolumeID == "" || v.Name != "data" || v.Token == "" || v.SizeMB != 16 {
		t.Fatalf("created %s", r.body)
	}
	// In a cluster the volume is recorded as on this server's node.
	if got, err := h.env.DB.GetVolume(context.Background(), "", v.VolumeID); err != nil || got.Node != "node-h" {
		t.Fatalf("stored: %+v, %v; want node node-h", got, err)
	}
	img := filepath.Join(dir, v.VolumeID, "image.ext4")
	if st, err := os.Stat(img); err != nil || st.Size() != 16<<20 {
		t.Fatalf("image: %v, %v", st, err)
	}
	for _, tc := range []struct {
		body   string
		status int
	}{
		{`{"name":"data"}`, http.StatusConflict},
		{`{"name":"../x"}`, http.StatusBadRequest},
		{`{"name":""}`, http.StatusBadRequest},
		{`{"name":"big","sizeMB":1}`, http.StatusBadRequest},
		{`{"name":"huge","sizeMB":99999999}`, http.StatusBadRequest},
		{`{"sizeMB":"x"}`, http.StatusBadRequest},
	} {
		h.do("POST", "/volumes", tc.body).errBody(t, tc.status)
	}
	// Team b may use the name; it sees only its own.
	if r := h.doKey("POST", "/volumes", `{"name":"data","sizeMB":8}`, keyB); r.status != http.StatusCreated {
		t.Fatalf("b create: %d %s", r.status, r.body)
	}
	var list []struct{ VolumeID, Name string }
	h.doKey("GET", "/volumes", "", keyB).json(t, &list)
	if len(list) != 1 || list[0].VolumeID == v.VolumeID {
		t.Fatalf("b's list: %+v", list)
	}
	h.doKey("GET", "/volumes/"+v.VolumeID, "", keyB).errBody(t, http.StatusNotFound)
	h.doKey("DELETE", "/volumes/"+v.VolumeID, "", keyB).errBody(t, http.StatusNotFound)
	var got struct{ VolumeID, Token string }
	if r := h.do("GET", "/volumes/"+v.VolumeID, ""); r.status != http.StatusOK {
		t.Fatalf("get: %d %s", r.status, r.body)
	} else if r.json(t, &got); got.Token != v.Token {
		t.Fatalf("get: %s", r.body)
	}
	h.do("GET", "/volumes/data", "").errBody(t, http.StatusNotFound) // by ID only, as E2B
	if r := h.do("DELETE", "/volumes/"+v.VolumeID, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Fatalf("image left after delete: %v", err)
	}
	h.do("DELETE", "/volumes/"+v.VolumeID, "").errBody(t, http.StatusNotFound)
}

// TestVolumesOff: without a volume manager the API answers 501.
func TestVolumesOff(t *testing.T) {
	h := newHarness(t)
	h.do("GET", "/volumes", "").errBody(t, http.StatusNotImplemented)
	h.do("POST", "/volumes", `{"name":"x"}`).errBody(t, http.StatusNotImplemented)
}

// TestCreateWithBadVolumeMounts: a create whose volumeMounts name a
// missing volume, another team's or a bad path is a 4xx naming it (never
// a 500), and a good volume listed beside a bad one is not left held: it
// can be deleted right after.
func TestCreateWithBadVolumeMounts(t *testing.T) {
	h, _ := newVolumeHarness(t)
	var good struct{ VolumeID string }
	h.do("POST", "/volumes", `{"name":"good","sizeMB":8}`).json(t, &good)
	if r := h.doKey("POST", "/volumes", `{"name":"theirs","sizeMB":8}`, h.keyFor("b")); r.status != http.StatusCreated {
		t.Fatalf("b's volume: %d %s", r.status, r.body)
	}
	for _, tc := range []struct {
		mounts string
		status int
		msg    string
	}{
		{`[{"name":"nope","path":"/data"}]`, http.StatusNotFound, `volume \"nope\" not found`},
		{`[{"name":"theirs","path":"/data"}]`, http.StatusNotFound, `volume \"theirs\" not found`},
		{`[{"name":"good","path":"data"}]`, http.StatusBadRequest, `invalid path \"data\"`},
		{`[{"name":"good","path":"/proc/x"}]`, http.StatusBadRequest, `cannot mount over /proc`},
		{`[{"name":"good","path":"/a"},{"name":"nope","path":"/b"}]`, http.StatusNotFound, `volume \"nope\" not found`},
		{`[{"name":"good","path":"/a"},{"name":"theirs","path":"/b"}]`, http.StatusNotFound, `volume \"theirs\" not found`},
		{`[{"name":"good","path":"/a"},{"name":"good","path":"/a"}]`, http.StatusBadRequest, `is used twice`},
		{`[{"name":"good","path":"/a"},{"name":"good","path":"/"}]`, http.StatusBadRequest, `cannot mount over the root`},
	} {
		r := h.do("POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":`+tc.mounts+`}`)
		r.errBody(t, tc.status)
		if !strings.Contains(string(r.body), tc.msg) {
			t.Errorf("%s: %d %s, want a message with %s", tc.mounts, r.status, r.body, tc.msg)
		}
	}
	if r := h.do("DELETE", "/volumes/"+good.VolumeID, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete the good volume after the failed creates: %d %s", r.status, r.body)
	}
}
