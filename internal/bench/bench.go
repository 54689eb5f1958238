// Package bench measures what a Moat user waits for: create a sandbox and
// run its first command through the API, against a baseline measured in the
// same process (a bare OCI-runtime run of the same root filesystem), so that
// the ratio means something on a noisy machine.
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	moat "github.com/moatsh/moat/sdk/go"
)

// Config says what to measure.
type Config struct {
	Client    *moat.Client
	Template  string // template to create sandboxes from
	RootfsDir string // the template's root filesystem, for the baseline
	N         int    // iterations of each
	// Runtimes, when set, measures create→first command once per runtime
	// (create metadata moat.runtime) in each iteration, on a server that
	// runs them all (moat serve --runtime container,gvisor,vm).
	Runtimes []string
	// Baseline runs /bin/true in RootfsDir with a bare OCI runtime and
	// returns how long it took (container.BareRun).
	Baseline func(ctx context.Context, rootfsDir string, args ...string) (time.Duration, error)
}

// Series is one measured quantity.
type Series struct {
	Name    string
	Samples []time.Duration
}

// Median returns the 50th percentile.
func (s Series) Median() time.Duration { return s.Percentile(50) }

// Percentile returns the p-th percentile (nearest rank).
func (s Series) Percentile(p float64) time.Duration {
	if len(s.Samples) == 0 {
		return 0
	}
	xs := slices.Clone(s.Samples)
	slices.Sort(xs)
	i := int(float64(len(xs))*p/100+0.5) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// Report is the outcome of Run.
type Report struct {
	CreateFirstCommand Series
	Bare               Series
	ByRuntime          []Series // with Config.Runtimes: one per runtime, in its order
}

// Ratio is median(create→first command) / median(bare run).
func (r Report) Ratio() float64 {
	b := r.Bare.Median()
	if b == 0 {
		return 0
	}
	return float64(r.CreateFirstCommand.Median()) / float64(b)
}

// Print writes the report as a small table.
func (r Report) Print(w io.Writer) {
	for _, s := range append([]Series{r.CreateFirstCommand}, append(r.ByRuntime, r.Bare)...) {
		if len(s.Samples) == 0 {
			continue
		}
		fmt.Fprintf(w, "%-40s n=%-3d median=%-10v p99=%v\n", s.Name, len(s.Samples),
			s.Median().Round(time.Millisecond), s.Percentile(99).Round(time.Millisecond))
	}
	if r.Ratio() > 0 {
		fmt.Fprintf(w, "ratio (median create→first command / median bare run) = %.2f\n", r.Ratio())
	}
}

// Run measures, interleaving the two series so that load changes hit both.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.N <= 0 {
		cfg.N = 10
	}
	rep := Report{
		CreateFirstCommand: Series{Name: "create → first command (API)"},
		Bare:               Series{Name: "bare OCI run of the same rootfs (/bin/true)"},
	}
	for _, rt := range cfg.Runtimes {
		rep.ByRuntime = append(rep.ByRuntime, Series{Name: "create → first command (API, " + rt + ")"})
	}
	for i := 0; i < cfg.N; i++ {
		if err := createRound(ctx, cfg, &rep); err != nil {
			return rep, fmt.Errorf("iteration %d: %w", i, err)
		}
		if cfg.Baseline != nil && cfg.RootfsDir != "" {
			d, err := cfg.Baseline(ctx, cfg.RootfsDir, "/bin/true")
			if err != nil {
				return rep, fmt.Errorf("baseline %d: %w", i, err)
			}
			rep.Bare.Samples = append(rep.Bare.Samples, d)
		}
	}
	return rep, nil
}

// createRound measures one create→first command on the default runtime,
// or one per runtime of cfg.Runtimes.
func createRound(ctx context.Context, cfg Config, rep *Report) error {
	if len(cfg.Runtimes) == 0 {
		d, err := createFirstCommand(ctx, cfg, "")
		if err != nil {
			return err
		}
		rep.CreateFirstCommand.Samples = append(rep.CreateFirstCommand.Samples, d)
		return nil
	}
	for j, rt := range cfg.Runtimes {
		d, err := createFirstCommand(ctx, cfg, rt)
		if err != nil {
			return fmt.Errorf("%s: %w", rt, err)
		}
		rep.ByRuntime[j].Samples = append(rep.ByRuntime[j].Samples, d)
	}
	return nil
}

// createFirstCommand times a create (on runtime rt when set) and its first command.
func createFirstCommand(ctx context.Context, cfg Config, rt string) (time.Duration, error) {
	start := time.Now()
	opts := moat.CreateOptions{Template: cfg.Template, Timeout: 2 * time.Minute}
	if rt != "" {
		opts.Metadata = map[string]string{"moat.runtime": rt}
	}
	sb, err := cfg.Client.CreateSandbox(ctx, opts)
	if err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	defer func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = sb.Kill(kctx)
	}()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	code, err := sb.Run(rctx, "true", moat.RunOptions{})
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	if code != 0 {
		return 0, fmt.Errorf("run: exit code %d", code)
	}
	return time.Since(start), nil
}
