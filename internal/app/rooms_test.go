package app

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBackendsStayInTheirRooms: no package outside internal/runtime and
// internal/app imports a backend (internal/runtime/container, gvisor, vm
// or a package under them): the wiring here owns them.
func TestBackendsStayInTheirRooms(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/moatsh/moat/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/moatsh/moat/"
	inside := regexp.MustCompile(`^` + regexp.QuoteMeta(mod) + `internal/(runtime|app)(/|$)`)
	backend := regexp.MustCompile(`^` + regexp.QuoteMeta(mod) + `internal/runtime/(container|gvisor|vm)(/|$)`)
	pkgs := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkgs++
		if len(f) == 0 || inside.MatchString(f[0]) {
			continue
		}
		for _, imp := range f[1:] {
			if backend.MatchString(imp) {
				t.Errorf("%s imports the backend package %s: reach it through internal/app", f[0], imp)
			}
		}
	}
	if pkgs < 50 {
		t.Fatalf("go list listed %d packages: the pattern is stale", pkgs)
	}
}
