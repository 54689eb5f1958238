// Package benchpair runs the Go benchmarks that compare two ways of doing
// one thing (this code against a baseline): both are measured alternately
// in the same process, so that a noisy host moves them together, and the
// medians and their ratio are reported. It keeps the benchmarks beside the
// code they measure to a few lines each.
package benchpair

import (
	"testing"
	"time"

	"github.com/moatsh/moat/internal/bench"
)

// Way is one side of a comparison: a name for the metric and the log, and
// one measured run.
type Way struct {
	Name string
	Run  func() time.Duration
}

// Compare runs now and then alternately for every iteration of b.Loop,
// reports each median as metric "<name>-ms" and logs both with the ratio
// now/then under what.
func Compare(b *testing.B, what string, now, then Way) {
	b.Helper()
	var n, t bench.Series
	for b.Loop() {
		t.Samples = append(t.Samples, then.Run())
		n.Samples = append(n.Samples, now.Run())
	}
	mn, mt := n.Median(), t.Median()
	b.ReportMetric(mn.Seconds()*1000, now.Name+"-ms")
	b.ReportMetric(mt.Seconds()*1000, then.Name+"-ms")
	b.Logf("%s: %v %s, %v %s (ratio %.2f), median of %d", what, mn, now.Name, mt, then.Name,
		mn.Seconds()/mt.Seconds(), len(n.Samples))
}
