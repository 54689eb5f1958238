package server_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/moatsh/moat/internal/oci/ocitest"
)

// TestTemplateBuildImageErrors: a build from an image that does not exist,
// or from a registry that refuses the credentials, is accepted (the pull
// runs in the background, as in E2B) and ends in status error with a
// reason naming the cause and the base step; nothing is left on disk and
// the name stays free.
func TestTemplateBuildImageErrors(t *testing.T) {
	h, _, bc := newBuildHarnessConfig(t)
	reg := ocitest.NewRegistry(t, "alice", "s3cret")
	reg.PushImage(t, "app/base:1", ocitest.Image(t, "linux/amd64", v1.Config{},
		ocitest.Layer(t, ocitest.Tar(t, ocitest.File("etc/os-release", 0o644, "ID=x\n")))))
	tests := []struct {
		name, body, reason string
	}{
		{"no-such-image", fmt.Sprintf(`{"fromImage":%q,"fromImageRegistry":{"type":"registry","username":"alice","password":"s3cret"}}`,
			reg.Ref("app/none:1")), "not found"},
		{"no-such-tag", fmt.Sprintf(`{"fromImage":%q,"fromImageRegistry":{"type":"registry","username":"alice","password":"s3cret"}}`,
			reg.Ref("app/base:2")), "not found"},
		{"bad-password", fmt.Sprintf(`{"fromImage":%q,"fromImageRegistry":{"type":"registry","username":"alice","password":"wrong"}}`,
			reg.Ref("app/base:1")), "credentials"},
		{"no-credentials", fmt.Sprintf(`{"fromImage":%q}`, reg.Ref("app/base:1")), "credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids := h.requestBuild(h.key, tt.name)
			r := h.do("POST", "/v2/templates/"+ids.TemplateID+"/builds/"+ids.BuildID, tt.body)
			if r.status != http.StatusAccepted {
				t.Fatalf("start: %d %s", r.status, r.body)
			}
			info, _ := h.waitBuild(h.key, ids)
			if info.Status != "error" || info.Reason == nil || info.Reason.Step != "base" ||
				!strings.Contains(info.Reason.Message, tt.reason) {
				t.Fatalf("build: %+v, want error at base naming %q", info.Reason, tt.reason)
			}
			if strings.Contains(info.Reason.Message, "s3cret") || strings.Contains(info.Reason.Message, "wrong") {
				t.Fatalf("reason shows the password: %s", info.Reason.Message)
			}
			h.do("GET", "/templates/aliases/"+tt.name, "").errBody(t, 404)
			if _, err := os.Lstat(filepath.Join(bc.DataDir, "templates", tt.name)); !os.IsNotExist(err) {
				t.Errorf("template dir left behind: %v", err)
			}
			work, _ := os.ReadDir(filepath.Join(bc.DataDir, "cache", "oci", "work"))
			if len(work) != 0 {
				t.Errorf("work dirs left behind: %v", work)
			}
		})
	}
}
