package vm

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkCreateFirstCommand measures Create of a sandbox from its
// template's snapshot, then its first and second command, over
// MOAT_BENCH_CREATE_ROUNDS rounds per variant (default 5; the template
// snapshots are taken before the first). The phases of each create are in
// the "sandbox created" log lines.
func BenchmarkCreateFirstCommand(b *testing.B) {
	createBenchOnce.Do(func() { runCreateBench(b) })
}

var createBenchOnce sync.Once

func runCreateBench(b *testing.B) {
	r := testRuntime(b)
	rounds := 5
	if s := os.Getenv("MOAT_BENCH_CREATE_ROUNDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			rounds = n
		}
	}
	ctx := context.Background()
	// The variants, alternated round by round: "old" restores a snapshot
	// taken without warm-up commands and copies the memory file on the
	// create's path; "warm" adds the warm-up; "new" also takes spares.
	variants := []struct {
		name     string
		template string
		spares   bool
	}{{"old (cold snapshot, copy)", "tinycold", false}, {"warm snapshot, copy", "tiny", false},
		{"new (warm snapshot, spare)", "tiny", true}}
	for _, cold := range []bool{true, false} {
		spec := testSpec(newID())
		spec.TemplateID = variants[1].template
		if cold {
			spec.TemplateID = variants[0].template
		}
		r.tpl.ColdSnapshot = cold
		if _, err := r.Create(ctx, spec); err != nil {
			b.Fatal(err)
		}
		_ = r.Kill(ctx, spec.ID)
	}
	r.tpl.ColdSnapshot = false
	spares := r.spares
	defer func() { r.spares, r.tpl.ColdSnapshot = spares, false }()
	type res struct{ creates, firsts, seconds []time.Duration }
	out := make([]res, len(variants))
	for i := 0; i < rounds*len(variants); i++ {
		v := variants[i%len(variants)]
		// Without spares: a nil set (its refills go on, so the next
		// round with spares finds them made).
		r.spares, r.tpl.ColdSnapshot = spares, v.template == variants[0].template
		if !v.spares {
			r.spares = nil
		}
		spec := testSpec(newID())
		spec.TemplateID = v.template
		time.Sleep(500 * time.Millisecond) // let the last round's writeback and refill settle
		t0 := time.Now()
		h, err := r.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := run(h, "root", time.Minute, "true"); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := run(h, "root", time.Minute, "true"); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		_ = r.Kill(ctx, spec.ID)
		o := &out[i%len(variants)]
		o.creates, o.firsts, o.seconds = append(o.creates, t1.Sub(t0)), append(o.firsts, t2.Sub(t1)), append(o.seconds, t3.Sub(t2))
	}
	b.StopTimer()
	fmt.Printf("vm create → first command (TCG, medians of %d rounds per variant, alternated)\n", rounds)
	for i, v := range variants {
		o := out[i]
		fmt.Printf("  %-28s create %4d ms | first command %4d ms | create→first command %4d ms | second command %3d ms\n",
			v.name, median(o.creates).Milliseconds(), median(o.firsts).Milliseconds(),
			(median(o.creates) + median(o.firsts)).Milliseconds(), median(o.seconds).Milliseconds())
	}
}
