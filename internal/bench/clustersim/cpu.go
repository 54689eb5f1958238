package clustersim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU is processor time spent in a run: this process's (the front doors,
// nodes and clients) and PostgreSQL's (the postmaster and its backends).
// On a machine that other work shares, it says what a create costs when
// the wall-clock figures cannot.
type CPU struct {
	Go, PG time.Duration
}

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times
// (100 on every Linux port).
const clockTick = 10 * time.Millisecond

// cpuNow reads the CPU time used so far by this process and by the
// PostgreSQL server pgPID and its children (those that exited count in
// its reaped children's time, so the sum only grows).
func cpuNow(pgPID int) CPU {
	var c CPU
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.Go = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if pgPID <= 0 {
		return c
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		f := procStat(p)
		if len(f) < 15 {
			continue
		}
		pid := strings.TrimSuffix(strings.TrimPrefix(p, "/proc/"), "/stat")
		switch {
		case pid == strconv.Itoa(pgPID):
			c.PG += ticks(f[11:15]...) // utime, stime, cutime, cstime
		case f[1] == strconv.Itoa(pgPID):
			c.PG += ticks(f[11:13]...) // a backend's utime, stime
		}
	}
	return c
}

// procStat is the fields of a /proc/<pid>/stat after the command's name:
// [0] is the state (field 3), [1] the parent (4), [11] utime (14).
func procStat(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func ticks(fs ...string) time.Duration {
	var n int64
	for _, f := range fs {
		v, _ := strconv.ParseInt(f, 10, 64)
		n += v
	}
	return time.Duration(n) * clockTick
}

// sub is c - o.
func (c CPU) sub(o CPU) CPU { return CPU{Go: c.Go - o.Go, PG: c.PG - o.PG} }
