package server

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// Metrics is the body of GET /metrics (E2B envd's field names).
type Metrics struct {
	Timestamp   int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}

// metrics remembers the previous CPU sample so that cpu_used_pct is the
// usage since the last call (since boot on the first).
type metrics struct {
	mu                sync.Mutex
	prevIdle, prevAll uint64
}

func newMetrics() *metrics { return &metrics{} }

func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	m, err := s.metrics.collect("/proc", "/")
	if err != nil {
		s.log.Warn("collect metrics", "err", err)
		writeError(w, http.StatusInternalServerError, errhttp.Generic(err))
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func (m *metrics) collect(proc, root string) (*Metrics, error) {
	out := &Metrics{Timestamp: time.Now().Unix(), CPUCount: runtime.NumCPU()}
	idle, all, err := readCPU(proc + "/stat")
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	dIdle, dAll := idle-m.prevIdle, all-m.prevAll
	m.prevIdle, m.prevAll = idle, all
	m.mu.Unlock()
	if dAll > 0 && dIdle <= dAll {
		out.CPUUsedPct = math.Round(float64(dAll-dIdle)/float64(dAll)*10000) / 100
	}
	mem, err := readMeminfo(proc + "/meminfo")
	if err != nil {
		return nil, err
	}
	out.MemTotal = mem["MemTotal"]
	avail, ok := mem["MemAvailable"]
	if !ok {
		avail = mem["MemFree"] + mem["Buffers"] + mem["Cached"]
	}
	if avail <= out.MemTotal {
		out.MemUsed = out.MemTotal - avail
	}
	out.MemCache = mem["Cached"]
	out.MemTotalMiB = out.MemTotal >> 20
	out.MemUsedMiB = out.MemUsed >> 20
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil {
		return nil, fmt.Errorf("statfs %s: %w: %w", root, err, errdefs.ErrInternal)
	}
	bsize := uint64(fs.Bsize)
	out.DiskTotal = fs.Blocks * bsize
	out.DiskUsed = (fs.Blocks - fs.Bfree) * bsize
	return out, nil
}

// readCPU returns the idle (idle+iowait) and total jiffies of /proc/stat's
// aggregate cpu line.
func readCPU(path string) (idle, all uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("read cpu stats: %w: %w", err, errdefs.ErrInternal)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("parse %s: unexpected first line %q: %w", path, line, errdefs.ErrInternal)
	}
	// user nice system idle iowait irq softirq steal (guest is in user).
	for i, f := range fields[1:] {
		if i >= 8 {
			break
		}
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse %s: %w: %w", path, err, errdefs.ErrInternal)
		}
		all += n
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return idle, all, nil
}

// readMeminfo returns /proc/meminfo's values in bytes.
func readMeminfo(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read meminfo: %w: %w", err, errdefs.ErrInternal)
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n *= 1024
		}
		out[key] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read meminfo: %w: %w", err, errdefs.ErrInternal)
	}
	return out, nil
}
