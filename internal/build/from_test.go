package build

import (
	"context"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/store"
)

func TestE2BBuiltin(t *testing.T) {
	for ref, want := range map[string]string{
		"e2bdev/base":                             "base",
		"e2bdev/base:latest":                      "base",
		"docker.io/e2bdev/base:1.2":               "base",
		"e2bdev/code-interpreter@sha256:abcd":     "code-interpreter-v1",
		"index.docker.io/e2bdev/code-interpreter": "code-interpreter-v1",
		"e2bdev/desktop":                          "",
		"base":                                    "",
		"localhost:5000/e2bdev/base":              "",
		"debian:12":                               "",
	} {
		if got := e2bBuiltin(ref); got != want {
			t.Errorf("e2bBuiltin(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestBuildFromImageNamingATemplate: a fromImage that names a template of
// the team builds from it (Docker's local image first), as E2B's SDK sends
// a Dockerfile's FROM; E2B's base images stand in as built-ins when no
// registry serves them; another team's template is not a local name.
func TestBuildFromImageNamingATemplate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, ref := range []string{"mini", "mini:latest"} {
		b, err := e.build(t, "a", "from-"+strings.ReplaceAll(ref, ":", "-"), Spec{FromImage: ref, Steps: []Step{{Type: "ENV", Args: []string{"A", "1"}}}})
		if err != nil || b.Status != store.BuildReady {
			t.Fatalf("fromImage %s: %+v, %v", ref, b, err)
		}
		if !strings.Contains(logText(e, b.ID), "FROM template mini") {
			t.Fatalf("fromImage %s: log:\n%s", ref, logText(e, b.ID))
		}
	}
	own, err := e.build(t, "a", "teams-own", Spec{FromTemplate: "mini"})
	if err != nil || own.Status != store.BuildReady {
		t.Fatalf("teams-own: %+v, %v", own, err)
	}
	// Team b has no template teams-own: it is an image reference to pull
	// (from a registry that does not answer here).
	b, err := e.build(t, "b", "not-local", Spec{FromImage: "teams-own"})
	if err == nil && b.Status == store.BuildReady {
		t.Fatalf("another team's template served as a local image: %+v", b)
	}
	// e2bdev/base: no registry serves it here, the built-in "base" stands
	// in ("mini" plays it in this store).
	if err := e.db.UpsertTemplate(ctx, store.Template{ID: "base", Name: "base", RootfsDir: mustTemplate(t, e, "mini").RootfsDir}); err != nil {
		t.Fatal(err)
	}
	b, err = e.build(t, "a", "from-e2bdev", Spec{FromImage: "e2bdev/base:latest"})
	if err != nil || b.Status != store.BuildReady {
		t.Fatalf("e2bdev/base: %+v, %v\n%s", b, err, logText(e, b.ID))
	}
	if log := logText(e, b.ID); !strings.Contains(log, "the built-in template base stands in") {
		t.Fatalf("e2bdev/base log:\n%s", log)
	}
}

// logText is the build's log, one "step message" per line.
func logText(e *env, buildID string) string {
	var lines []string
	for _, l := range e.m.Logs(buildID, 0) {
		lines = append(lines, l.Step+" "+l.Message)
	}
	return strings.Join(lines, "\n")
}

func mustTemplate(t *testing.T, e *env, name string) store.Template {
	t.Helper()
	tpl, err := e.db.GetTeamTemplate(context.Background(), "a", name)
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}
