package build

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCopyScript checks the COPY script's quoting and that sh parses it
// (sh -n: nothing runs; the script itself only ever runs in a build
// sandbox).
func TestCopyScript(t *testing.T) {
	for _, c := range []*CopyStep{
		{Src: "app", Dest: "/srv/app", Hash: strings.Repeat("a", 64)},
		{Src: "src/*.py", Dest: "rel dir/", Mode: 0o644, Hash: strings.Repeat("b", 64)},
		{Src: "it's $(rm -rf /)", Dest: "/x'; rm -rf /; '", Mode: 0o4755, Hash: strings.Repeat("c", 64)},
	} {
		s := copyScript(c, c.Dest, "user", true)
		if out, err := exec.Command("sh", "-n", "-c", s).CombinedOutput(); err != nil {
			t.Fatalf("sh -n: %v %s\n%s", err, out, s)
		}
		if strings.Contains(s, "$(rm") && !strings.Contains(s, `'$''('rm`) {
			t.Fatalf("command substitution not quoted:\n%s", s)
		}
	}
	if got := globq("a b/*.py"); got != `a' 'b/*.py` {
		t.Fatalf("globq = %s", got)
	}
	if got := shq("it's"); got != `'it'\''s'` {
		t.Fatalf("shq = %s", got)
	}
}
