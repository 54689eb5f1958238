package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
)

// ReadStats reads the usage of path from the v1 hierarchies, or from the
// unified tree on a v2-only host. A missing memory usage file (no such
// cgroup) is errdefs.ErrNotFound; the other readings are best effort.
func ReadStats(path string) (runtime.Stats, error) {
	st := runtime.Stats{Time: time.Now()}
	var err error
	if V2Only() {
		d := filepath.Join(Root, path)
		if st.MemoryBytes, err = readUint(filepath.Join(d, "memory.current")); err != nil {
			return st, err
		}
		st.MemoryLimit, _ = readUint(filepath.Join(d, "memory.max")) // "max" reads as 0
		st.Pids, _ = readUint(filepath.Join(d, "pids.current"))
		if usec, err := readKey(filepath.Join(d, "cpu.stat"), "usage_usec"); err == nil {
			st.CPUUsageNs = usec * 1000
		}
		return st, nil
	}
	if st.MemoryBytes, err = readUint(filepath.Join(Root, "memory", path, "memory.usage_in_bytes")); err != nil {
		return st, err
	}
	st.MemoryLimit, _ = readUint(filepath.Join(Root, "memory", path, "memory.limit_in_bytes"))
	st.CPUUsageNs, _ = readUint(filepath.Join(Root, "cpuacct", path, "cpuacct.usage"))
	st.Pids, _ = readUint(filepath.Join(Root, "pids", path, "pids.current"))
	return st, nil
}

// readUint reads a one-number cgroup file; "max" reads as 0.
func readUint(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("cgroup file %s: %w", p, errdefs.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("cgroup file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup file %s: %w", p, err)
	}
	return v, nil
}

// readKey reads the value of key from a "key value" per line cgroup file.
func readKey(p, key string) (uint64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("cgroup file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == key {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", p, key)
}

// OOMKills is how many processes of path the kernel's OOM killer has
// killed (memory.events oom_kill on v2, memory.oom_control on v1); 0 when
// the cgroup is gone or the counter unreadable.
func OOMKills(path string) uint64 {
	if V2Only() {
		n, _ := readKey(filepath.Join(Root, path, "memory.events"), "oom_kill")
		return n
	}
	n, _ := readKey(filepath.Join(Root, "memory", path, "memory.oom_control"), "oom_kill")
	return n
}
