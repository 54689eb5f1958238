package templatesnap

import (
	"context"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/runtime/vm/prune"
)

// Prune removes the template images nothing needs any more (see
// prune.Templates). current lists the templates that exist (TemplateID and
// RootfsDir; each keeps the directory of its current build); busy lists
// template IDs a create is using right now (every directory of theirs is
// kept). A current template's snapshots must match the boot (kernel +
// initramfs) and image layout this Set would take (Ensure
// touches what it hands out, which keeps it from a prune for minAge).
func (t *Set) Prune(ctx context.Context, current []runtime.Spec, busy []string, minAge time.Duration) (prune.Stats, error) {
	keep := map[string]bool{}
	for _, s := range current {
		keep[runtime.TemplateKey(s)] = true
	}
	busyPrefix := make([]string, 0, len(busy))
	for _, id := range busy {
		busyPrefix = append(busyPrefix, runtime.TemplateKey(runtime.Spec{TemplateID: id, RootfsDir: "/nonexistent"}))
	}
	var snapMeta []string
	if bf, err := t.BootFiles(); err == nil {
		snapMeta = []string{fmt.Sprintf("boot %s %s", bf.Version, bf.Key), "image " + image.ImageName, warmMetaLine}
	}
	return prune.Templates(ctx, t.Log, t.Dir, keep, busyPrefix, snapMeta, minAge)
}
