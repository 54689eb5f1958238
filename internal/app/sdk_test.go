package app

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/testkit"
)

// TestJSSDKControlPlane runs the official e2b npm SDK (test/e2e/node_modules)
// against Serve with the fake runtime: every control-plane call the SDK
// makes, with its own response checks and error mapping.
func TestJSSDKControlPlane(t *testing.T) {
	node := testkit.RequireTool(t, "node") // Node.js >= 20
	mod, _ := filepath.Abs("../../test/e2e/node_modules/e2b")
	if _, err := os.Stat(mod); err != nil {
		testkit.Missing(t, "e2b SDK not installed at %s: run `npm ci` in test/e2e: %v", mod, err)
	}
	rt, dir := fakeRuntimeWithBase(t, "apptest-sdk")
	base, stdout, stop := startRuntime(t, dir, rt.EnvdPort, "apptest-sdk")
	defer stop()
	key := regexp.MustCompile(`e2b_[0-9a-f]{40}`).FindString(stdout.String())

	cctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, node, "testdata/sdk_control_plane.cjs")
	cmd.Env = append(os.Environ(), "E2B_MODULE="+mod, "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base,
		"E2B_API_KEY="+key, "E2B_DOMAIN=moat.test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("SDK script: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
