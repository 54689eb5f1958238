// Package testkit holds the few helpers Moat's tests share, so that every
// package waits, checks prerequisites and makes data dirs the same way.
//
// A test that needs a real component (root, crun, QEMU, a built template)
// calls one of the Require helpers. On a developer's machine a missing
// component skips the test with the reason; under scripts/test.sh, which
// sets MOAT_TEST_REQUIRE=1, it fails it, so that a suite that cannot run
// its real components never passes by skipping. Skips that are by design
// (a test that does not apply to this host or runtime) are listed with
// their reason in test/skips.txt, which scripts/test.sh checks.
package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RequireEnv is the variable that turns a missing prerequisite into a
// failure. scripts/test.sh sets it to 1.
const RequireEnv = "MOAT_TEST_REQUIRE"

// FullEnv is the variable scripts/test.sh --full sets: tests scale their
// bursts and rounds up to the sizes the full tier runs.
const FullEnv = "MOAT_TEST_FULL"

// Required reports whether missing prerequisites fail tests.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Full reports whether the full tier is running.
func Full() bool { return os.Getenv(FullEnv) == "1" }

// Missing reports a missing prerequisite: the test fails when Required,
// else it is skipped. The message names the cause.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := "missing prerequisite: " + fmt.Sprintf(format, args...)
	if Required() {
		t.Fatal(msg + " (" + RequireEnv + "=1: a real-component test that cannot run fails)")
	}
	t.Skip(msg)
}

// RequireRoot needs euid 0 (namespaces, mounts, cgroups, nftables).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root")
	}
}

// RequireTool needs one of names on PATH and returns the first found.
func RequireTool(t testing.TB, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if len(names) == 1 {
		Missing(t, "%s not on PATH (scripts/setup.sh installs it)", names[0])
	} else {
		Missing(t, "none of %v on PATH (scripts/setup.sh installs them)", names)
	}
	return ""
}

// RequireNoErr is Missing when err, a failed setup step such as a go build
// of envd, is not nil: a setup failure fails the suite under RequireEnv.
func RequireNoErr(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		Missing(t, "%s: %v", what, err)
	}
}

// DataDir is the data dir whose templates/ cache scripts/setup.sh filled:
// MOAT_DATA_DIR, else /var/lib/moat-ci.
func DataDir() string {
	if d := os.Getenv("MOAT_DATA_DIR"); d != "" {
		return d
	}
	return "/var/lib/moat-ci"
}

// RequireTemplate needs the built template name (its rootfs with envd) in
// DataDir and returns the rootfs.
func RequireTemplate(t testing.TB, name string) string {
	t.Helper()
	rootfs := filepath.Join(DataDir(), "templates", name, "rootfs")
	if _, err := os.Stat(filepath.Join(rootfs, "usr/local/bin/envd")); err != nil {
		Missing(t, "no %s template at %s (scripts/setup.sh builds it): %v", name, rootfs, err)
	}
	return rootfs
}

// TempDataDir makes a data dir for a server or runtime under test. It is
// mode 0711 like a real one, so that sandboxes' unprivileged roots can
// traverse it, and it is removed when the test ends.
func TempDataDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// WaitFor polls cond every 10 ms until it holds, and fails the test naming
// what it waited for when timeout passes first. Use it instead of a sleep
// before an assertion.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
