package server_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/store"
)

// TestEnvdVersionOfTemplate: a sandbox reports the envd version recorded
// in its template (create, connect, get, list), and this server's for a
// template that recorded none.
func TestEnvdVersionOfTemplate(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ name, recorded, want string }{
		{"recorded", "0.1.9", "0.1.9"},
		{"legacy", "", state.Version},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := h.env.DB.UpsertTemplate(context.Background(), store.Template{ID: "tpl" + tc.name, Name: tc.name,
				RootfsDir: "/nonexistent", CPUCount: 1, MemoryMB: 256, DiskSizeMB: 1024, EnvdVersion: tc.recorded})
			if err != nil {
				t.Fatal(err)
			}
			var sb rest.Sandbox
			r := h.do("POST", "/v2/sandboxes", `{"templateID":"`+tc.name+`"}`)
			r.json(t, &sb)
			if sb.EnvdVersion != tc.want {
				t.Fatalf("create: envdVersion %q, want %q (%s)", sb.EnvdVersion, tc.want, r.body)
			}
			h.do("POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":60}`).json(t, &sb)
			if sb.EnvdVersion != tc.want {
				t.Fatalf("connect: envdVersion %q, want %q", sb.EnvdVersion, tc.want)
			}
			var d rest.SandboxDetail
			h.do("GET", "/sandboxes/"+sb.SandboxID, "").json(t, &d)
			if d.EnvdVersion != tc.want {
				t.Fatalf("get: envdVersion %q, want %q", d.EnvdVersion, tc.want)
			}
			var list []rest.ListedSandbox
			h.do("GET", "/v2/sandboxes?metadata=", "").json(t, &list)
			found := false
			for _, l := range list {
				if l.SandboxID == sb.SandboxID {
					found = true
					if l.EnvdVersion != tc.want {
						t.Fatalf("list: envdVersion %q, want %q", l.EnvdVersion, tc.want)
					}
				}
			}
			if !found {
				t.Fatalf("list: %s missing: %s", sb.SandboxID, mustJSON(list))
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
