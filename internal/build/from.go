package build

import (
	"context"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
)

// localFrom returns the template a fromImage names when the team has one
// by that name (with or without ":latest"): Docker uses a local image
// before it pulls, and E2B's SDK sends a Dockerfile's FROM as fromImage,
// so `FROM base` means the template base here as it does for
// `moat template build --dockerfile`. "" when the name is not a template.
func (m *Manager) localFrom(ctx context.Context, team, ref string) (string, error) {
	for _, name := range []string{ref, strings.TrimSuffix(ref, ":latest")} {
		if name == "" || strings.ContainsAny(name, "/@") {
			continue
		}
		_, err := m.cfg.DB.GetTeamTemplate(ctx, team, name)
		if err == nil {
			return name, nil
		}
		if !errdefs.IsNotFound(err) {
			return "", err
		}
	}
	return "", nil
}

// e2bBuiltins maps E2B's own base images to the built-in templates that
// stand in for them when no registry serves them (a machine without Docker
// Hub): a template written for E2B (`FROM e2bdev/base`) builds here too.
var e2bBuiltins = map[string]string{
	"e2bdev/base":             "base",
	"e2bdev/code-interpreter": "code-interpreter-v1",
}

// e2bBuiltin returns the built-in template that stands in for ref, one of
// E2B's base images with or without a registry host, a tag or a digest;
// "" for any other image.
func e2bBuiltin(ref string) string {
	r := ref
	if i := strings.Index(r, "@"); i >= 0 {
		r = r[:i]
	}
	if i := strings.LastIndex(r, ":"); i > strings.LastIndex(r, "/") {
		r = r[:i]
	}
	for _, host := range []string{"docker.io/", "index.docker.io/", "registry-1.docker.io/"} {
		r = strings.TrimPrefix(r, host)
	}
	return e2bBuiltins[r]
}
