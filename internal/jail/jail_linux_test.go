package jail

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/testkit"
)

func TestJailedProgram(t *testing.T) {
	testkit.RequireRoot(t)
	dir := t.TempDir() // 0700 root: only the bind mount makes it reachable
	if err := os.Chown(dir, 0, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(filepath.Dir(dir), "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secret)
	run := func(argv ...string) (string, error) {
		cmd, err := Command(&Config{UID: 1 << 30, GID: 1 << 30, Mounts: []Mount{{Path: dir, Writable: true}},
			Dir: dir, Path: argv[0], Args: argv[1:]})
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := run("/usr/bin/id"); err != nil || out != "uid=1073741824 gid=1073741824 groups=1073741824" {
		t.Errorf("id: %q, %v", out, err)
	}
	out, err := run("/usr/bin/ls", "-A", "/")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(out)
	sort.Strings(got)
	for _, e := range got {
		switch e {
		case "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "dev", "etc", strings.Split(dir, "/")[1]:
		default:
			t.Errorf("unexpected /%s in the jail (all: %v)", e, got)
		}
	}
	if out, err := run("/usr/bin/touch", filepath.Join(dir, "f")); err != nil {
		t.Errorf("cannot write its own dir: %v %s", err, out)
	}
	for _, p := range []string{secret, "/etc/passwd", "/proc/self/status", "/x"} {
		if out, err := run("/usr/bin/touch", p); err == nil {
			t.Errorf("touch %s succeeded: %s", p, out)
		}
	}
	if _, err := Command(&Config{UID: 0, GID: 1, Path: "/usr/bin/id"}); err == nil {
		t.Error("uid 0 accepted")
	}
}
