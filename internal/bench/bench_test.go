package bench

import (
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
