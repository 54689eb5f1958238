package slots

import (
	"context"
	"strconv"
	"strings"

	"github.com/moatsh/moat/internal/runtime"
)

// Key is what a slot must share with a create to serve it: the template
// build (a runtime.TemplateKey, in which "/" cannot occur) and the size.
func Key(build string, spec runtime.Spec) string {
	return build + "/" + strconv.Itoa(spec.VCPUs) + "/" + strconv.Itoa(spec.MemoryMiB) + "/" +
		strconv.Itoa(spec.DiskMiB) + "/" + strconv.Itoa(spec.Pids)
}

// Eligible says whether a create of spec may use and refill slots: not
// from a snapshot, without volumes, not a pool member.
func Eligible(spec runtime.Spec) bool {
	return spec.Snapshot == "" && len(spec.Volumes) == 0 && !spec.Background
}

// SpecKey is Key of spec's template build as it is now.
func SpecKey(spec runtime.Spec) string { return Key(runtime.TemplateKey(spec), spec) }

// DropStale kills the idle slots of template builds that are not those of
// current (the templates that exist): a slot keeps its template's files
// from a prune, and a rebuilt template's slots never serve a create again.
func (s *Set) DropStale(ctx context.Context, current []runtime.Spec) error {
	keep := map[string]bool{}
	for _, spec := range current {
		keep[runtime.TemplateKey(spec)] = true
	}
	return s.Drop(ctx, func(key string) bool {
		build, _, _ := strings.Cut(key, "/")
		return !keep[build]
	})
}
