package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestAPIKeys: a team's key lists, creates (the value once), renames and
// deletes the team's keys; another team's key sees and touches none of
// them; bad names and IDs are 400 and 404; a key cannot delete itself.
func TestAPIKeys(t *testing.T) {
	h := newHarness(t)
	var list []struct {
		ID, Name string
		Mask     struct{ Prefix, MaskedValuePrefix, MaskedValueSuffix string }
		Key      string
	}
	h.do("GET", "/api-keys", "").json(t, &list)
	if len(list) != 1 || list[0].Mask.Prefix != "e2b_" || list[0].Key != "" || !strings.HasPrefix(h.key, "e2b_"+list[0].Mask.MaskedValuePrefix) {
		t.Fatalf("list: %+v", list)
	}
	own := list[0].ID
	var made struct {
		ID, Key, Name string
		Mask          struct{ MaskedValueSuffix string }
	}
	r := h.do("POST", "/api-keys", `{"name":"ci"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	r.json(t, &made)
	if made.Name != "ci" || !strings.HasPrefix(made.Key, "e2b_") || !strings.HasSuffix(made.Key, made.Mask.MaskedValueSuffix) {
		t.Fatalf("created: %+v", made)
	}
	// The new key works, and is listed without its value.
	if r := h.doKey("GET", "/v2/sandboxes", "", made.Key); r.status != http.StatusOK {
		t.Fatalf("the new key: %d", r.status)
	}
	h.do("GET", "/api-keys", "").json(t, &list)
	if len(list) != 2 || list[1].Name != "ci" || list[1].Key != "" || strings.Contains(string(h.do("GET", "/api-keys", "").body), made.Key) {
		t.Fatalf("list after create: %+v", list)
	}
	if r := h.do("PATCH", "/api-keys/"+made.ID, `{"name":"deploy"}`); r.status != http.StatusOK {
		t.Fatalf("rename: %d %s", r.status, r.body)
	}
	// Another team sees none of these keys and touches none.
	keyB := h.keyFor("b")
	h.doKey("GET", "/api-keys", "", keyB).json(t, &list)
	if len(list) != 1 || list[0].ID == own || list[0].ID == made.ID {
		t.Fatalf("team b lists %+v", list)
	}
	h.doKey("PATCH", "/api-keys/"+made.ID, `{"name":"x"}`, keyB).errBody(t, http.StatusNotFound)
	h.doKey("DELETE", "/api-keys/"+made.ID, "", keyB).errBody(t, http.StatusNotFound)
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/api-keys", `{"name":""}`, http.StatusBadRequest},
		{"POST", "/api-keys", `{"name":"` + strings.Repeat("n", 129) + `"}`, http.StatusBadRequest},
		{"POST", "/api-keys", `{"name":`, http.StatusBadRequest},
		{"POST", "/api-keys", ``, http.StatusBadRequest},
		{"PATCH", "/api-keys/" + made.ID, `{"name":"  "}`, http.StatusBadRequest},
		{"PATCH", "/api-keys/999999", `{"name":"x"}`, http.StatusNotFound},
		{"DELETE", "/api-keys/not-a-number", "", http.StatusNotFound},
		{"DELETE", "/api-keys/-1", "", http.StatusNotFound},
		{"DELETE", "/api-keys/" + own, "", http.StatusConflict},
	} {
		h.do(tc.method, tc.path, tc.body).errBody(t, tc.status)
	}
	if r := h.doKey("GET", "/api-keys", "", "e2b_"+strings.Repeat("0", 40)); r.status != http.StatusUnauthorized {
		t.Errorf("a wrong key: %d", r.status)
	}
	// The first key deletes the second, which then stops working.
	if r := h.do("DELETE", "/api-keys/"+made.ID, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := h.doKey("GET", "/v2/sandboxes", "", made.Key); r.status != http.StatusUnauthorized {
		t.Fatalf("a deleted key: %d", r.status)
	}
}
