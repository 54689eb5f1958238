package usage

import (
	"testing"
	"time"
)

func TestHistory(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * CollectEvery) }
	reading := func(i int) Metric {
		return Metric{Time: at(i), CPUCount: 2, CPUUsedPct: float64(i % 100), MemUsed: uint64(i), MemTotal: 512 << 20,
			MemCache: 7, DiskUsed: uint64(2 * i), DiskTotal: 1 << 30}
	}
	var h History
	if _, ok := h.Last(); ok || len(h.Between(time.Time{}, time.Time{})) != 0 {
		t.Fatal("an empty history has readings")
	}
	for i := range HistoryLen + 10 {
		h.Add(reading(i))
	}
	h.Add(reading(3)) // out of order: dropped
	all := h.Between(time.Time{}, time.Time{})
	if len(all) != HistoryLen || !all[0].Time.Equal(at(10)) || !all[len(all)-1].Time.Equal(at(HistoryLen+9)) {
		t.Fatalf("kept %d readings from %v to %v, want %d from %v to %v", len(all), all[0].Time, all[len(all)-1].Time,
			HistoryLen, at(10), at(HistoryLen+9))
	}
	for i, m := range all {
		if want := reading(i + 10); m != want {
			t.Fatalf("reading %d = %+v, want %+v", i, m, want)
		}
	}
	for _, tc := range []struct {
		name       string
		start, end time.Time
		first      time.Time
		n          int
	}{
		{"closed range", at(20), at(29), at(20), 10},
		{"open start", time.Time{}, at(14), at(10), 5},
		{"open end", at(HistoryLen + 5), time.Time{}, at(HistoryLen + 5), 5},
		{"between readings", at(20).Add(time.Second), at(21).Add(-time.Second), time.Time{}, 0},
		{"before all", t0.Add(-time.Hour), t0, time.Time{}, 0},
		{"end before start", at(30), at(20), time.Time{}, 0},
	} {
		got := h.Between(tc.start, tc.end)
		if len(got) != tc.n || (tc.n > 0 && !got[0].Time.Equal(tc.first)) {
			t.Errorf("%s: %d readings %v, want %d from %v", tc.name, len(got), got, tc.n, tc.first)
		}
	}
	if last, ok := h.Last(); !ok || !last.Time.Equal(at(HistoryLen+9)) {
		t.Fatalf("last = %v, %v", last.Time, ok)
	}
}
