package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	moat "github.com/moatsh/moat/sdk/go"
)

// TTI modes after ComputeSDK's public methodology: each sandbox's time to
// interactive is its create plus its first command, measured by the
// client.
const (
	Sequential = "sequential" // one after another
	Staggered  = "staggered"  // one every Stagger, overlapping
	Burst      = "burst"      // all at once
)

// TTIModes are the modes in the order `moat bench --tti all` runs them.
var TTIModes = []string{Sequential, Staggered, Burst}

// TTIConfig says what to measure.
type TTIConfig struct {
	Client   *moat.Client
	Template string
	Mode     string
	N        int           // sandboxes (default 100)
	Stagger  time.Duration // between starts in Staggered (default 200 ms)
	Runtime  string        // create metadata moat.runtime ("" = the server's default)
}

// TTIReport is one mode's outcome.
type TTIReport struct {
	Mode      string
	N         int
	TTI       Series         // successful sandboxes only
	Failures  map[string]int // error text (first line) → count
	Wall      time.Duration  // from the first start to the last answer
	ClientCPU time.Duration  // user+system CPU of this process meanwhile
	// HostCPU is the busy CPU time of the whole host meanwhile, from
	// /proc/stat (0 where there is none): the server's, the sandboxes' and
	// the client's work, less noisy than the wall time on a shared host.
	HostCPU time.Duration
	// Slowest is the successful sandbox that took longest, which the
	// trimmed percentiles leave out: its ID finds it in the server's log.
	Slowest Slowest
}

// Slowest is one sandbox's time to interactive in its two parts.
type Slowest struct {
	Sandbox       string
	Create, First time.Duration // the create call; the first command after it
}

// RunTTI measures cfg.N sandboxes in cfg.Mode; every sandbox made is
// killed after all are measured (so that a burst holds them all at once).
func RunTTI(ctx context.Context, cfg TTIConfig) (TTIReport, error) {
	if cfg.N <= 0 {
		cfg.N = 100
	}
	if cfg.Stagger <= 0 {
		cfg.Stagger = 200 * time.Millisecond
	}
	if !slices.Contains(TTIModes, cfg.Mode) {
		return TTIReport{}, fmt.Errorf("tti mode %q: want one of %s", cfg.Mode, strings.Join(TTIModes, ", "))
	}
	rep := TTIReport{Mode: cfg.Mode, N: cfg.N, TTI: Series{Name: "time to interactive (" + cfg.Mode + ")"},
		Failures: map[string]int{}}
	var mu sync.Mutex
	var made []*moat.Sandbox
	one := func() {
		create, d, sb, err := tti(ctx, cfg)
		mu.Lock()
		defer mu.Unlock()
		if sb != nil {
			made = append(made, sb)
		}
		if err != nil {
			rep.Failures[firstLine(err.Error())]++
			return
		}
		rep.TTI.Samples = append(rep.TTI.Samples, d)
		if s := rep.Slowest; d > s.Create+s.First {
			rep.Slowest = Slowest{Sandbox: sb.ID, Create: create, First: d - create}
		}
	}
	cpu0, host0 := cpuTime(), hostBusy()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range cfg.N {
		switch cfg.Mode {
		case Sequential:
			one()
		case Staggered:
			if i > 0 {
				time.Sleep(cfg.Stagger)
			}
			wg.Go(one)
		case Burst:
			wg.Go(one)
		}
	}
	wg.Wait()
	rep.Wall, rep.ClientCPU = time.Since(start), cpuTime()-cpu0
	if host1 := hostBusy(); host0 > 0 && host1 > host0 {
		rep.HostCPU = host1 - host0
	}
	killAll(ctx, made)
	return rep, nil
}

// tti creates one sandbox and runs its first command; it returns how long
// the create took and the whole.
func tti(ctx context.Context, cfg TTIConfig) (create, total time.Duration, _ *moat.Sandbox, _ error) {
	start := time.Now()
	opts := moat.CreateOptions{Template: cfg.Template, Timeout: 10 * time.Minute}
	if cfg.Runtime != "" {
		opts.Metadata = map[string]string{"moat.runtime": cfg.Runtime}
	}
	sb, err := cfg.Client.CreateSandbox(ctx, opts)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("create: %w", err)
	}
	create = time.Since(start)
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	code, err := sb.Run(rctx, "true", moat.RunOptions{})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d", code)
	}
	if err != nil {
		return create, 0, sb, fmt.Errorf("first command: %w", err)
	}
	return create, time.Since(start), sb, nil
}

func killAll(ctx context.Context, sbs []*moat.Sandbox) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, sb := range sbs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = sb.Kill(kctx)
		})
	}
	wg.Wait()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// cpuTime is this process's user and system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hostBusy is the CPU time all of the host's CPUs have been busy since
// boot (user, nice, system, irq and softirq in /proc/stat's first line;
// not idle, iowait or the time a hypervisor stole), 0 where /proc/stat
// cannot be read.
func hostBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	return parseBusy(string(b))
}

// parseBusy reads hostBusy's sum from /proc/stat's text (0 if malformed).
func parseBusy(stat string) time.Duration {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var ticks uint64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil || n > maxBusyTicks {
			return 0
		}
		ticks += n // five fields of at most maxBusyTicks: no uint64 overflow
	}
	if ticks > maxBusyTicks {
		return 0
	}
	return time.Duration(ticks) * (time.Second / clockTicks)
}

// maxBusyTicks is the most ticks a time.Duration holds (~292 years of CPU
// time). The bound was 2^40 per field, whose product with a second in
// nanoseconds overflowed into a negative duration (found by FuzzParseBusy).
const maxBusyTicks = uint64(math.MaxInt64 / int64(time.Second/clockTicks))

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Moat builds for.
const clockTicks = 100

// Trimmed is s without the fastest and slowest frac of its samples each
// (ComputeSDK trims 5 % on each side before its percentiles).
func (s Series) Trimmed(frac float64) Series {
	xs := slices.Clone(s.Samples)
	slices.Sort(xs)
	k := int(float64(len(xs)) * frac)
	if len(xs)-2*k <= 0 {
		return Series{Name: s.Name, Samples: xs}
	}
	return Series{Name: s.Name, Samples: xs[k : len(xs)-k]}
}

// PrintTTI writes the reports as a table: success rate, trimmed median,
// p95 and p99, wall time, the client's CPU and the host's busy CPU per
// sandbox.
func PrintTTI(w io.Writer, label string, reps []TTIReport) {
	fmt.Fprintf(w, "%-28s %5s %8s %9s %9s %9s %9s %10s %12s\n", "time to interactive ("+label+")", "n", "success", "median", "p95", "p99",
		"wall", "client cpu", "host cpu/sb")
	for _, r := range reps {
		t := r.TTI.Trimmed(0.05)
		perSandbox := "-"
		if r.HostCPU > 0 {
			perSandbox = (r.HostCPU / time.Duration(max(r.N, 1))).Round(100 * time.Microsecond).String()
		}
		fmt.Fprintf(w, "%-28s %5d %7.1f%% %9v %9v %9v %9v %10v %12s\n", r.Mode, r.N, 100*float64(len(r.TTI.Samples))/float64(max(r.N, 1)),
			t.Median().Round(time.Millisecond), t.Percentile(95).Round(time.Millisecond), t.Percentile(99).Round(time.Millisecond),
			r.Wall.Round(10*time.Millisecond), r.ClientCPU.Round(10*time.Millisecond), perSandbox)
		for msg, n := range r.Failures {
			fmt.Fprintf(w, "    %d × %s\n", n, msg)
		}
		if s := r.Slowest; s.Sandbox != "" {
			fmt.Fprintf(w, "    slowest %v: %s (create %v, first command %v)\n", (s.Create + s.First).Round(time.Millisecond),
				s.Sandbox, s.Create.Round(time.Millisecond), s.First.Round(time.Millisecond))
		}
	}
}
