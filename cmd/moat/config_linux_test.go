package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestBackendFlags: each backend setting comes from its MOAT_* variable
// unless its flag is given, and reaches its backend's settings typed.
func TestBackendFlags(t *testing.T) {
	t.Setenv("MOAT_OCI_RUNTIME", "crun")
	t.Setenv("MOAT_GVISOR_FLAGS", "--debug  --debug-log=/tmp/x/")
	t.Setenv("MOAT_VM_ACCEL", "tcg")
	t.Setenv("MOAT_RUNSC", "")
	tests := []struct {
		args []string
		oci  string
		acc  string
	}{
		{nil, "crun", "tcg"},
		{[]string{"--oci-runtime", "runc", "--vm-accel=kvm"}, "runc", "kvm"},
	}
	for _, tt := range tests {
		var bf backendFlags
		cmd := &cobra.Command{Use: "x"}
		bf.register(cmd)
		if err := cmd.ParseFlags(tt.args); err != nil {
			t.Fatal(err)
		}
		b := bf.backends()
		if b.Container.OCIRuntime != tt.oci || b.VM.Accel != tt.acc || b.GVisor.Runsc != "" ||
			!slices.Equal(b.GVisor.Flags, []string{"--debug", "--debug-log=/tmp/x/"}) {
			t.Errorf("args %v: backends = %+v", tt.args, b)
		}
	}
}

// TestConfigAtTheEdge: below cmd/, no code reads a MOAT_* variable or sets
// one to pass a setting on; cmd/moat's flags are where they are read. Test
// code is exempt: _test.go files and internal/testkit, the helpers only
// tests import (MOAT_TEST_REQUIRE, MOAT_DATA_DIR of scripts/setup.sh).
func TestConfigAtTheEdge(t *testing.T) {
	bad := regexp.MustCompile(`os\.(Getenv|LookupEnv)\("MOAT_|os\.Setenv\(`)
	for _, dir := range []string{"../../internal", "../../cmd"} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && p == "../../internal/testkit" {
				return fs.SkipDir
			}
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(b), "\n") {
				if !bad.MatchString(line) {
					continue
				}
				if strings.HasPrefix(p, "../../cmd/") && !strings.Contains(line, "os.Setenv(") {
					continue // a binary's main package is its edge
				}
				t.Errorf("%s:%d: %s", p, i+1, strings.TrimSpace(line))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestConfigDocumented: every MOAT_* variable a flag of cmd/moat reads is
// in docs/configuration.md's table, with its flag.
func TestConfigDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	flagVar := regexp.MustCompile(`"([a-z][a-z0-9-]+)", envOr\([^,]+, "(MOAT_[A-Z0-9_]+)"\)`)
	files, _ := filepath.Glob("*.go")
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flagVar.FindAllStringSubmatch(string(b), -1) {
			seen++
			row := regexp.MustCompile("(?m)^\\| `" + m[2] + "`[^|]*\\| `--" + m[1] + "`")
			if !row.Match(doc) {
				t.Errorf("%s: --%s (env %s) has no row in docs/configuration.md", f, m[1], m[2])
			}
		}
	}
	if seen < 5 {
		t.Fatalf("found only %d flag variables: the pattern is stale", seen)
	}
}
