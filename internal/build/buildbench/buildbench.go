// Package buildbench measures template builds through the real build path
// (build.Manager, a SandboxRunner on the container runtime, an OCI
// registry served in-process): a cold build of a template from a Debian
// image with realistic steps, a fully cached rebuild and a rebuild with
// the last step changed, as `moat bench --template-build` prints them.
package buildbench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/moatsh/moat/internal/bench"
	"github.com/moatsh/moat/internal/runtime"
)

// Config says what Run measures.
type Config struct {
	// DataDir holds templates/base/rootfs, the Debian tree pushed to the
	// registry as the image; the builds run in a scratch directory made
	// in it and removed at the end.
	DataDir string
	N       int    // rounds (default 3)
	Package string // what the first step apt-get installs (default "jq")
	// Progress gets a line per build (nil discards them).
	Progress io.Writer
	// BuildLog, when set, gets every build's log.
	BuildLog io.Writer
	// NewRuntime makes the build sandboxes' runtime: the container
	// backend with the server's settings (app.NewContainerRuntime); nil:
	// the registered "container" backend with its defaults.
	NewRuntime func(context.Context, runtime.Config) (runtime.Runtime, error)
}

// Report holds the samples of each kind of build.
type Report struct {
	Cold, Cached, LastChanged bench.Series
}

// Goal is the most a fully cached rebuild may take, as a share of a cold
// build.
const Goal = 0.05

// Ratio is the median cached rebuild over the median cold build.
func (r Report) Ratio() float64 {
	if m := r.Cold.Median(); m > 0 {
		return float64(r.Cached.Median()) / float64(m)
	}
	return 0
}

// Print writes the medians and ratios.
func (r Report) Print(w io.Writer) {
	for _, s := range []bench.Series{r.Cold, r.Cached, r.LastChanged} {
		fmt.Fprintf(w, "%-52s n=%-3d median=%-10v p99=%v\n", s.Name, len(s.Samples),
			s.Median().Round(time.Millisecond), s.Percentile(99).Round(time.Millisecond))
	}
	if m := r.Cold.Median(); m > 0 {
		fmt.Fprintf(w, "ratio cached/cold = %.4f (goal < %.2f)\n", r.Ratio(), Goal)
		fmt.Fprintf(w, "ratio last-step-changed/cold = %.4f\n", float64(r.LastChanged.Median())/float64(m))
	}
}
