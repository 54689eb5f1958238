package container

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"sync"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatsh/moat/internal/runtime/container/oci"
)

// seccompBPFs holds the seccomp filters crun compiled in this process,
// keyed by the SHA-256 of the profile's JSON (*bpfEntry). libseccomp
// compiling seccompProfile costs ~2.5 ms of every crun start; Debian's crun
// has no cache of its own (built without libgcrypt). The compiled program
// goes into each bundle as oci.SeccompBPFAnnotation, and crun loads it as
// is. linux.seccomp stays in the spec: runc and readers of config.json see
// the profile, and the annotation is exactly what crun compiles for it
// (TestSeccompBPFMatchesProfile).
var seccompBPFs sync.Map

type bpfEntry struct {
	once sync.Once
	b64  string // "" when compiling failed: the profile alone is used
}

// compileTimeout bounds the one-off throwaway container (~25-60 ms).
const compileTimeout = 30 * time.Second

// addSeccompBPF sets the annotation on s when the OCI runtime is crun,
// compiling the profile on first use. It never fails: on any error the
// spec keeps the plain profile (crun compiles it), and the error is logged
// once per process.
func (r *Runtime) addSeccompBPF(ctx context.Context, s *specs.Spec) {
	if r.oci.Name != "crun" || s.Linux == nil || s.Linux.Seccomp == nil {
		return
	}
	b64 := r.seccompBPF(ctx, s.Linux.Seccomp)
	if b64 == "" {
		return
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[oci.SeccompBPFAnnotation] = b64
}

// seccompBPF returns base64 of crun's program for profile, "" if it could
// not be compiled.
func (r *Runtime) seccompBPF(ctx context.Context, profile *specs.LinuxSeccomp) string {
	js, err := json.Marshal(profile)
	if err != nil {
		r.log.WarnContext(ctx, "seccomp profile: not precompiled, crun compiles it per start", "err", err)
		return ""
	}
	v, _ := seccompBPFs.LoadOrStore(sha256.Sum256(js), &bpfEntry{})
	e := v.(*bpfEntry)
	e.once.Do(func() {
		// Not the caller's context: its cancellation would be cached.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compileTimeout)
		defer cancel()
		start := time.Now()
		bpf, err := r.oci.CompileSeccomp(cctx, profile)
		if err != nil {
			r.log.WarnContext(ctx, "seccomp profile: not precompiled, crun compiles it per start", "err", err)
			return
		}
		e.b64 = base64.StdEncoding.EncodeToString(bpf)
		r.log.InfoContext(ctx, "seccomp profile precompiled", "bpf_bytes", len(bpf), "took", time.Since(start).Round(time.Microsecond))
	})
	return e.b64
}
