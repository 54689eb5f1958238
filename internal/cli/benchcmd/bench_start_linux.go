package benchcmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/bench"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
	moat "github.com/moatsh/moat/sdk/go"
)

// moat bench --start: issue 12's first "done when" for the container
// runtime, in this one process. It runs the server in-process (app.Serve)
// twice, without a pool and then with a pool of startConcurrent, and times
// create→first command as an SDK does it: the Go SDK's CreateSandbox (POST
// /sandboxes) and Run("true") (envd's /process.Process/Start of
// `/bin/bash -l -c true` through the server's proxy), next to a bare crun
// run of /bin/true on the same root filesystem, interleaved with the
// unpooled creates. Then startConcurrent creates at once, with and without
// the pool. Nothing here asserts a time: targets are printed beside the numbers.

// startConcurrent is how many creates run at once, and the pool's size.
const startConcurrent = 20

// startRounds is how many times the concurrent creates are repeated.
const startRounds = 3

// startSettle is the pause before each sequential create: it comes to a
// quiet server (the previous sandbox killed, a slot's making done), as an
// agent's create usually does; bursts are the concurrent rounds.
const startSettle = 150 * time.Millisecond

// startReport holds what benchStart measured.
type startReport struct {
	bare                     bench.Series
	unpooled, pooled         startSeries
	noSlots                  *startSeries // unpooled with --container-prelaunch 0, when unpooled has slots
	concUnpooled, concPooled bench.Series // wall time of startConcurrent creates→first command
}

// benchStart runs the whole benchmark and prints it; n is the number of
// sequential creates of each kind.
func benchStart(cmd *cobra.Command, dataDir string, be app.Backends, tmpl string, n int) error {
	ctx, began := cmd.Context(), time.Now()
	rootfs := template.Layout{DataDir: dataDir}.RootfsDir(tmpl)
	rep := startReport{
		bare:         bench.Series{Name: "bare crun run /bin/true (same rootfs)"},
		unpooled:     startSeries{total: bench.Series{Name: "unpooled"}},
		pooled:       startSeries{total: bench.Series{Name: "pooled"}},
		concUnpooled: bench.Series{Name: "unpooled"},
		concPooled:   bench.Series{Name: fmt.Sprintf("pool of %d", startConcurrent)},
	}
	if err := benchUnpooled(ctx, dataDir, be, tmpl, rootfs, n, &rep); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := benchPooled(ctx, dataDir, be, tmpl, n, &rep); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	rep.print(cmd.OutOrStdout(), tmpl)
	fmt.Fprintf(cmd.OutOrStdout(), "(benchmark took %s)\n", time.Since(began).Round(time.Second))
	return nil
}

// benchUnpooled measures on servers without a pool: n creates with no
// slots (--container-prelaunch 0) and then the concurrent rounds, and,
// unless slots are off, n creates on a server with slots (each create
// starts the container its predecessor had created ahead); each create is
// next to a bare crun run.
func benchUnpooled(ctx context.Context, dataDir string, be app.Backends, tmpl, rootfs string, n int, rep *startReport) error {
	nb := be
	nb.Container.Prelaunch = -1
	base := &rep.unpooled
	if be.Container.Prelaunch >= 0 {
		rep.unpooled.total.Name = "unpooled (created ahead)"
		rep.noSlots = &startSeries{total: bench.Series{Name: "unpooled, --container-prelaunch 0"}}
		base = rep.noSlots
	}
	err := withServer(ctx, dataDir, nb, func(c *moat.Client) error {
		if err := sequentialCreates(ctx, c, be, tmpl, rootfs, 0, n, base, rep); err != nil {
			return err
		}
		return concurrentRounds(ctx, c, tmpl, rep)
	})
	if err != nil || be.Container.Prelaunch < 0 {
		return err
	}
	return withServer(ctx, dataDir, be, func(c *moat.Client) error {
		return sequentialCreates(ctx, c, be, tmpl, rootfs, -1, n, &rep.unpooled, rep)
	})
}

// withServer runs f against an unpooled container server with be.
func withServer(ctx context.Context, dataDir string, be app.Backends, f func(c *moat.Client) error) error {
	c, stop, err := benchServer(ctx, dataDir, app.ContainerRuntime, be, nil)
	if err != nil {
		return err
	}
	defer stop()
	return f(c)
}

// sequentialCreates times creates from..n-1 (negative ones untimed: the
// first makes the first slot), each after startSettle and next to a bare
// crun run.
func sequentialCreates(ctx context.Context, c *moat.Client, be app.Backends, tmpl, rootfs string, from, n int, out *startSeries, rep *startReport) error {
	for i := from; i < n; i++ {
		time.Sleep(startSettle)
		d, err := timeCreateFirstCommand(ctx, c, tmpl)
		if err != nil {
			return fmt.Errorf("unpooled create %d: %w", i, err)
		}
		if i < 0 {
			continue
		}
		out.add(d)
		bare, err := app.BareRun(ctx, be.Container.OCIRuntime, rootfs, "/bin/true")
		if err != nil {
			return fmt.Errorf("bare run %d: %w", i, err)
		}
		rep.bare.Samples = append(rep.bare.Samples, bare)
	}
	return nil
}

// concurrentRounds times startRounds of startConcurrent creates at once
// on an unpooled server.
func concurrentRounds(ctx context.Context, c *moat.Client, tmpl string, rep *startReport) error {
	for i := range startRounds {
		d, err := concurrentCreates(ctx, c, tmpl, startConcurrent)
		if err != nil {
			return fmt.Errorf("concurrent unpooled creates, round %d: %w", i, err)
		}
		rep.concUnpooled.Samples = append(rep.concUnpooled.Samples, d)
	}
	return nil
}

// benchPooled measures on a server with a pool of startConcurrent members,
// each measurement starting with a full pool (no refill running).
func benchPooled(ctx context.Context, dataDir string, be app.Backends, tmpl string, n int, rep *startReport) error {
	c, stop, err := benchServer(ctx, dataDir, app.ContainerRuntime, be, []orchestrator.PoolSpec{{Template: tmpl, Size: startConcurrent}})
	if err != nil {
		return err
	}
	defer stop()
	for i := range n {
		if err := waitPoolFull(ctx, c); err != nil {
			return err
		}
		d, err := timeCreateFirstCommand(ctx, c, tmpl)
		if err != nil {
			return fmt.Errorf("pooled create %d: %w", i, err)
		}
		rep.pooled.add(d)
	}
	for i := range startRounds {
		if err := waitPoolFull(ctx, c); err != nil {
			return err
		}
		d, err := concurrentCreates(ctx, c, tmpl, startConcurrent)
		if err != nil {
			return fmt.Errorf("concurrent pooled creates, round %d: %w", i, err)
		}
		rep.concPooled.Samples = append(rep.concPooled.Samples, d)
	}
	return nil
}

// benchServer runs a server with `moat serve`'s defaults on a free local
// port, runtime rt and pools, until stop; it returns a client
// with a fresh API key. Its log goes to stderr from serverLogLevel up.
func benchServer(ctx context.Context, dataDir, rt string, be app.Backends, pools []orchestrator.PoolSpec) (*moat.Client, func(), error) {
	return benchServerWith(ctx, app.Config{DataDir: dataDir, Runtime: rt, Pools: pools, Backends: be,
		Admission: admission.Config{Concurrency: admission.DefaultConcurrency, Queue: 4 * admission.DefaultConcurrency}})
}

// benchServerWith runs a server with cfg (Addr, Logger, Stdout and Stderr
// are set here) until stop, like benchServer. The server listens on a
// port the kernel picks and says which: picking a free port first and
// listening on it later lost the port now and then to a connection made
// in between ("bind: address already in use" between density runs).
func benchServerWith(ctx context.Context, cfg app.Config) (*moat.Client, func(), error) {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	heard := &listenAddr{found: make(chan string, 1)}
	cfg.Addr, cfg.Stdout, cfg.Stderr = "127.0.0.1:0", io.Discard, heard
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: serverLogLevel}))
	dataDir := cfg.DataDir
	go func() { done <- app.Serve(sctx, cfg) }()
	stop := func() { cancel(); <-done }
	var addr string
	select {
	case addr = <-heard.found:
	case err := <-done:
		cancel()
		return nil, nil, fmt.Errorf("server: %w", err)
	case <-time.After(time.Minute):
		stop()
		return nil, nil, errors.New("server did not listen within a minute")
	}
	base := "http://" + addr
	key, err := app.CreateAPIKey(ctx, dataDir, store.DefaultTeam)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return &moat.Client{APIURL: base, APIKey: key}, stop, nil
}

// listenAddr takes the server's stderr (which has only its "moat listening
// on ADDR" line; its log goes to its Logger) and sends ADDR to found once.
type listenAddr struct {
	mu    sync.Mutex
	line  []byte
	found chan string
	sent  bool
}

func (l *listenAddr) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sent {
		return len(p), nil
	}
	l.line = append(l.line, p...)
	for {
		i := bytes.IndexByte(l.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		if a, ok := strings.CutPrefix(string(l.line[:i]), "moat listening on "); ok {
			l.found <- strings.TrimSpace(a)
			l.sent, l.line = true, nil
			return len(p), nil
		}
		l.line = l.line[i+1:]
	}
}

// serverLogLevel is the in-process server's log level: WARN, or DEBUG with
// `bench --start -v` (the create steps of every sandbox, to see where a
// create's time goes).
var serverLogLevel = slog.LevelWarn

// startSeries are create→first command and its two halves.
type startSeries struct{ total, create, first, second bench.Series }

// add records one timeCreateFirstCommand.
func (s *startSeries) add(d [3]time.Duration) {
	s.total.Samples = append(s.total.Samples, d[0]+d[1])
	s.create.Samples = append(s.create.Samples, d[0])
	s.first.Samples = append(s.first.Samples, d[1])
	s.second.Samples = append(s.second.Samples, d[2])
}

// printParts prints the halves (and the second command) with line.
func (s startSeries) printParts(line func(name string, samples []time.Duration, note string)) {
	line("  CreateSandbox", s.create.Samples, "")
	line("  Run(\"true\")", s.first.Samples, "")
	line("  (a second Run(\"true\"), not counted)", s.second.Samples, "")
}

// timeCreateFirstCommand times CreateSandbox, Run("true") and a second
// Run("true") (the command's floor through the proxy) apart and kills the
// sandbox afterwards (not timed).
func timeCreateFirstCommand(ctx context.Context, c *moat.Client, tmpl string) ([3]time.Duration, error) {
	var d [3]time.Duration
	t0 := time.Now()
	sb, err := c.CreateSandbox(ctx, moat.CreateOptions{Template: tmpl, Timeout: 5 * time.Minute})
	if err != nil {
		return d, fmt.Errorf("create: %w", err)
	}
	defer killQuietly(ctx, sb)
	t1 := time.Now()
	code, err := sb.Run(ctx, "true", moat.RunOptions{})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d", code)
	}
	d[0], d[1] = t1.Sub(t0), time.Since(t1)
	if err != nil {
		return d, fmt.Errorf("run: %w", err)
	}
	t2 := time.Now()
	if _, err := sb.Run(ctx, "true", moat.RunOptions{}); err != nil {
		return d, fmt.Errorf("second run: %w", err)
	}
	d[2] = time.Since(t2)
	return d, nil
}

// createRun creates a sandbox and runs `true` in it as the SDKs'
// commands.run does; the sandbox is returned when it was created.
func createRun(ctx context.Context, c *moat.Client, tmpl string) (*moat.Sandbox, error) {
	sb, err := c.CreateSandbox(ctx, moat.CreateOptions{Template: tmpl, Timeout: 5 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	code, err := sb.Run(ctx, "true", moat.RunOptions{})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d", code)
	}
	if err != nil {
		return sb, fmt.Errorf("run: %w", err)
	}
	return sb, nil
}

func killQuietly(ctx context.Context, sb *moat.Sandbox) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = sb.Kill(kctx)
}

// concurrentCreates runs k creates→first command at once and returns the
// wall time until the last command finished; the sandboxes are killed
// after (not timed).
func concurrentCreates(ctx context.Context, c *moat.Client, tmpl string, k int) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, k)
	sbs := make([]*moat.Sandbox, k)
	ends := make([]time.Duration, k)
	start := time.Now()
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sbs[i], errs[i] = createRun(ctx, c, tmpl)
			ends[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for _, sb := range sbs {
		if sb != nil {
			wg.Add(1)
			go func() { defer wg.Done(); killQuietly(ctx, sb) }()
		}
	}
	wg.Wait()
	return slices.Max(ends), errors.Join(errs...)
}

// waitPoolFull waits until every pool of the server is full.
func waitPoolFull(ctx context.Context, c *moat.Client) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pools, err := c.ListPools(ctx)
		if err != nil {
			return err
		}
		full := len(pools) > 0
		for _, p := range pools {
			full = full && p.Ready >= p.Size
		}
		if full {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pool not full after 3 minutes: %+v", pools)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// print writes the report with the targets beside the numbers.
func (r startReport) print(w io.Writer, tmpl string) {
	fmt.Fprintf(w, "container runtime, template %s: create→first command through the REST API and envd's process API\n", tmpl)
	fmt.Fprintf(w, "(Go SDK CreateSandbox, then Run(\"true\") = /process.Process/Start of `bash -l -c true` via the proxy)\n")
	line := func(name string, samples []time.Duration, note string) {
		s := bench.Series{Samples: samples}
		fmt.Fprintf(w, "  %-38s n=%-3d median=%-9v p99=%-9v %s\n", name, len(samples),
			s.Median().Round(100*time.Microsecond), s.Percentile(99).Round(100*time.Microsecond), note)
	}
	bare := float64(r.bare.Median())
	ratio := func(s bench.Series) float64 { return float64(s.Median()) / max(bare, 1) }
	u, p := r.unpooled.total, r.pooled.total
	line(r.bare.Name, r.bare.Samples, "")
	line(u.Name, u.Samples, fmt.Sprintf("%.2f× bare  target ≤ 1.50× bare  %s", ratio(u), verdict(ratio(u) <= 1.5)))
	r.unpooled.printParts(line)
	if ns := r.noSlots; ns != nil {
		line(ns.total.Name, ns.total.Samples, fmt.Sprintf("%.2f× bare  (created ahead ÷ this: %.2f)", ratio(ns.total),
			float64(u.Median())/max(float64(ns.total.Median()), 1)))
		ns.printParts(line)
	}
	line(p.Name, p.Samples, fmt.Sprintf("%.2f× bare  target p50 ≤ 15 ms     %s", ratio(p), verdict(p.Median() <= 15*time.Millisecond)))
	r.pooled.printParts(line)
	fmt.Fprintf(w, "%d creates→first command at once: wall time until the last (median of %d rounds)\n", startConcurrent, startRounds)
	cp, cu := r.concPooled.Median(), r.concUnpooled.Median()
	line(r.concPooled.Name, r.concPooled.Samples, fmt.Sprintf("target ≤ 0.5 s  %s", verdict(cp <= 500*time.Millisecond)))
	line(r.concUnpooled.Name, r.concUnpooled.Samples, fmt.Sprintf("target ≤ 1.5 s  %s  (%.1f× pooled)", verdict(cu <= 1500*time.Millisecond), float64(cu)/max(float64(cp), 1)))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
