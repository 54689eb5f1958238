package template

import (
	"context"
	"github.com/moatsh/moat/internal/template/catalog"
	"github.com/moatsh/moat/internal/testkit"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestRealBuild builds the base template with the real mmdebstrap. It
// downloads packages, so it runs only with MOAT_TEST_TEMPLATE_BUILD=1 (and
// MOAT_ENVD or bin/envd for the agent). MOAT_TEST_DATA_DIR reuses a data dir
// (and its apt cache) between runs.
func TestRealBuild(t *testing.T) {
	if os.Getenv("MOAT_TEST_TEMPLATE_BUILD") != "1" {
		t.Skip("opt-in: set MOAT_TEST_TEMPLATE_BUILD=1 to build a real Debian rootfs (downloads packages)")
	}
	// Opted in: what it needs is a prerequisite from here on.
	testkit.RequireRoot(t) // mmdebstrap --mode=root
	testkit.RequireTool(t, "mmdebstrap")
	envd, err := FindEnvd(os.Getenv(EnvdEnv))
	if err != nil {
		if envd, err = FindEnvd("../../bin/envd"); err != nil {
			testkit.Missing(t, "no envd binary: run `make build` or set MOAT_ENVD: %v", err)
		}
	}
	dataDir := os.Getenv("MOAT_TEST_DATA_DIR")
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	def, _ := catalog.Lookup("base")
	opts := Options{DataDir: dataDir, EnvdPath: envd, Out: os.Stderr}
	res, err := Build(ctx, def, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("build: %s (cached=%v)", res.Duration, res.Cached)
	for _, f := range []string{"etc/dpkg/dpkg.cfg.d/99mmdebstrap", "etc/dpkg/dpkg.cfg.d/moat-slim", "usr/bin/python3", "usr/bin/git", "usr/bin/curl", "usr/bin/sudo",
		"etc/sudoers.d/user", "usr/local/bin/envd", "home/user"} {
		if _, err := os.Stat(filepath.Join(res.RootfsDir, f)); err != nil {
			t.Errorf("rootfs lacks %s: %v", f, err)
		}
	}
	out, err := exec.CommandContext(ctx, "chroot", res.RootfsDir, "su", "-", "user", "-c", "id -u; sudo -n id -u").Output()
	if err != nil || string(out) != "1000\n0\n" {
		t.Errorf("user/sudo check: %q %v", out, err)
	}
	again, err := Build(ctx, def, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cached {
		t.Errorf("rebuild: cached=%v in %s, want a cache hit", again.Cached, again.Duration)
	}
	t.Logf("cached rebuild: %s", again.Duration) // a figure: tests set no absolute time limits
}
