package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestSeriesPercentiles(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	tests := []struct {
		samples     []time.Duration
		median, p99 time.Duration
	}{
		{nil, 0, 0},
		{ms(5), 5 * time.Millisecond, 5 * time.Millisecond},
		{ms(3, 1, 2), 2 * time.Millisecond, 3 * time.Millisecond},
		{ms(10, 1, 2, 3, 4, 5, 6, 7, 8, 9), 5 * time.Millisecond, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		s := Series{Samples: tt.samples}
		if got := s.Median(); got != tt.median {
			t.Errorf("Median(%v) = %v, want %v", tt.samples, got, tt.median)
		}
		if got := s.Percentile(99); got != tt.p99 {
			t.Errorf("P99(%v) = %v, want %v", tt.samples, got, tt.p99)
		}
	}
	r := Report{CreateFirstCommand: Series{Samples: ms(30)}, Bare: Series{Samples: ms(20)}}
	if got := r.Ratio(); got != 1.5 {
		t.Errorf("Ratio = %v, want 1.5", got)
	}
}

func TestTrimmed(t *testing.T) {
	var s Series
	for i := 1; i <= 100; i++ {
		s.Samples = append(s.Samples, time.Duration(101-i)*time.Millisecond)
	}
	tr := s.Trimmed(0.05)
	if len(tr.Samples) != 90 || tr.Samples[0] != 6*time.Millisecond || tr.Samples[89] != 95*time.Millisecond {
		t.Fatalf("trimmed %d samples, %v..%v", len(tr.Samples), tr.Samples[0], tr.Samples[len(tr.Samples)-1])
	}
	if got := (Series{Samples: []time.Duration{3}}).Trimmed(0.05); len(got.Samples) != 1 {
		t.Fatalf("one sample trimmed to %d", len(got.Samples))
	}
	if _, err := RunTTI(context.Background(), TTIConfig{Mode: "flood"}); err == nil {
		t.Fatal("an unknown mode was accepted")
	}
}

func TestParseBusy(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
	}{
		{"busy fields only", "cpu  100 20 30 5000 70 4 6 9 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n", 160 * 10 * time.Millisecond},
		{"no trailing newline", "cpu 1 0 0 0 0 0 0", 10 * time.Millisecond},
		{"per-cpu line first", "cpu0 1 2 3 4 5 6 7 8\n", 0},
		{"too few fields", "cpu 1 2 3\n", 0},
		{"not a number", "cpu 1 x 3 4 5 6 7 8\n", 0},
		{"empty", "", 0},
		{"large", "cpu 0 10000000000 0 0 0 0 0", 1e10 * 10 * time.Millisecond}, // it overflowed into a negative duration once
		{"fields beyond a duration together", "cpu 900000000000 900000000000 0 0 0 0 0", 0},
	} {
		if got := parseBusy(tc.stat); got != tc.want {
			t.Errorf("%s: parseBusy = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzParseBusy(f *testing.F) {
	f.Add("cpu  100 20 30 5000 70 4 6 9 0 0\n")
	f.Fuzz(func(t *testing.T, stat string) {
		if parseBusy(stat) < 0 {
			t.Fatal("negative busy time")
		}
	})
}

// The table names the slowest sandbox, which the trimmed percentiles leave
// out, with its create and first command apart.
func TestPrintTTISlowest(t *testing.T) {
	var b strings.Builder
	PrintTTI(&b, "x", []TTIReport{{Mode: Burst, N: 2, TTI: Series{Samples: []time.Duration{time.Second, 5 * time.Second}},
		Failures: map[string]int{}, Slowest: Slowest{Sandbox: "isb1", Create: 4900 * time.Millisecond, First: 100 * time.Millisecond}}})
	if want := "slowest 5s: isb1 (create 4.9s, first command 100ms)"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
}
