package bench

import (
	"context"
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
