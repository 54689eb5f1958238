package usage

import (
	"sync"
	"time"
)

const (
	// CollectEvery is how often the orchestrator reads every running
	// sandbox's usage into its History.
	CollectEvery = 5 * time.Second
	// HistoryLen is how many readings a History keeps: 30 minutes at
	// CollectEvery, ~20 KiB per sandbox once full.
	HistoryLen = 360
)

// sample is a Metric packed for keeping (56 bytes instead of 88).
type sample struct {
	unixMs           int64
	cpuPct           float32
	cpuCount         int32
	memUsed, memTot  uint64
	memCache         uint64
	diskUsed, diskTo uint64
}

func pack(m Metric) sample {
	return sample{unixMs: m.Time.UnixMilli(), cpuPct: float32(m.CPUUsedPct), cpuCount: int32(m.CPUCount),
		memUsed: m.MemUsed, memTot: m.MemTotal, memCache: m.MemCache, diskUsed: m.DiskUsed, diskTo: m.DiskTotal}
}

func (s sample) unpack() Metric {
	return Metric{Time: time.UnixMilli(s.unixMs).UTC(), CPUUsedPct: float64(s.cpuPct), CPUCount: int(s.cpuCount),
		MemUsed: s.memUsed, MemTotal: s.memTot, MemCache: s.memCache, DiskUsed: s.diskUsed, DiskTotal: s.diskTo}
}

// History is a sandbox's most recent readings, for the metrics API's time
// ranges (E2B's getMetrics({start, end})). Its zero value is empty and
// ready; it grows to HistoryLen readings, then drops the oldest. Safe for
// concurrent use.
type History struct {
	mu   sync.Mutex
	ring []sample // guarded by mu; oldest at next once full
	next int      // guarded by mu
}

// Add keeps m. Readings are expected in time order; one not after the
// newest kept is dropped.
func (h *History) Add(m Metric) {
	s := pack(m)
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.ring); n > 0 && s.unixMs <= h.ring[(h.next+n-1)%n].unixMs {
		return
	}
	if len(h.ring) < HistoryLen {
		h.ring = append(h.ring, s)
		return
	}
	h.ring[h.next] = s
	h.next = (h.next + 1) % HistoryLen
}

// Between returns the kept readings from start to end (both included; a
// zero time leaves that side open), oldest first.
func (h *History) Between(start, end time.Time) []Metric {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []Metric{}
	for i := range h.ring {
		s := h.ring[(h.next+i)%len(h.ring)]
		if (!start.IsZero() && s.unixMs < start.UnixMilli()) || (!end.IsZero() && s.unixMs > end.UnixMilli()) {
			continue
		}
		out = append(out, s.unpack())
	}
	return out
}

// Last is the newest reading kept, if any.
func (h *History) Last() (Metric, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.ring)
	if n == 0 {
		return Metric{}, false
	}
	return h.ring[(h.next+n-1)%n].unpack(), true
}
