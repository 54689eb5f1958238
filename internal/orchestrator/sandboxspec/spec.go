// Package sandboxspec checks what a create asks for against the server's
// limits and turns a template into the runtime.Spec of a new sandbox:
// default sizes, the ceilings, the timeout's bounds, an environment that
// execve accepts, and the random IDs and tokens of new records. It exists
// apart from the lifecycle because all of it is pure: it has no state and
// calls nothing.
package sandboxspec

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/sandboxid"
	"github.com/moatsh/moat/internal/store"
)

// Sizes of a sandbox whose template sets none.
const (
	DefaultVCPUs     = 2
	DefaultMemoryMiB = 512
	DefaultPids      = 1024
	DefaultDiskMiB   = 2048
)

// Limits are the server's ceilings (0 = none, but MaxTimeout must be set).
type Limits struct {
	MaxTimeout   time.Duration // longest lifetime of a sandbox
	MaxVCPUs     int
	MaxMemoryMiB int
	MaxDiskMiB   int
}

// CheckTimeout reports whether d is a lifetime a sandbox may be given:
// in (0, MaxTimeout]; the errors are ErrInvalidArgument with E2B's text.
func (l Limits) CheckTimeout(d time.Duration) error {
	if d <= 0 {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "Timeout must be greater than 0")
	}
	if d > l.MaxTimeout {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "Timeout cannot be greater than %s", fmtHours(l.MaxTimeout))
	}
	return nil
}

func fmtHours(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%d hours", int(d/time.Hour))
	}
	return d.String()
}

// Spec is the runtime.Spec of a new sandbox of tpl on the runtime called
// rt, with a fresh ID; a size over a ceiling is ErrInvalidArgument.
func (l Limits) Spec(tpl store.Template, rt string, allowInternet bool) (runtime.Spec, error) {
	s := runtime.Spec{ID: sandboxid.New(), TemplateID: tpl.ID, RootfsDir: tpl.RootfsDir, Runtime: rt,
		VCPUs: DefaultVCPUs, MemoryMiB: DefaultMemoryMiB, DiskMiB: DefaultDiskMiB, Pids: DefaultPids,
		AllowInternet: allowInternet, Hostname: "e2b"}
	if tpl.CPUCount > 0 {
		s.VCPUs = tpl.CPUCount
	}
	if tpl.MemoryMB > 0 {
		s.MemoryMiB = tpl.MemoryMB
	}
	if tpl.DiskSizeMB > 0 {
		s.DiskMiB = tpl.DiskSizeMB
	}
	for _, c := range []struct {
		name     string
		val, max int
	}{{"cpuCount", s.VCPUs, l.MaxVCPUs}, {"memoryMB", s.MemoryMiB, l.MaxMemoryMiB}, {"diskSizeMB", s.DiskMiB, l.MaxDiskMiB}} {
		if c.max > 0 && c.val > c.max {
			return s, errdefs.Publicf(errdefs.ErrInvalidArgument, "template %s: %s %d exceeds the server maximum %d", tpl.Name, c.name, c.val, c.max)
		}
	}
	return s, nil
}

// RandomHex is n random bytes in hex (access tokens).
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
