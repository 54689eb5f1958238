package vm

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
)

const cgroupRoot = "/sys/fs/cgroup"

// limits are what a QEMU process may use.
type limits struct {
	MemoryBytes int64
	Pids        int64
	CPUs        int
}

func cgroup2Only() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// cgroupDirs are the directories of path in each hierarchy we use.
func cgroupDirs(path string) []string {
	if cgroup2Only() {
		return []string{filepath.Join(cgroupRoot, path)}
	}
	var out []string
	seen := map[string]bool{}
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct"} {
		real, err := filepath.EvalSymlinks(filepath.Join(cgroupRoot, c)) // cpu → cpu,cpuacct on some hosts
		if err == nil && !seen[real] {
			seen[real] = true
			out = append(out, filepath.Join(real, path))
		}
	}
	return out
}

// createCgroup makes path with lim; addToCgroup moves a process into it.
func createCgroup(path string, lim limits) error {
	quota := strconv.Itoa(lim.CPUs * 100000)
	var files map[string]string
	if cgroup2Only() {
		files = map[string]string{"memory.max": strconv.FormatInt(lim.MemoryBytes, 10),
			"pids.max": strconv.FormatInt(lim.Pids, 10), "cpu.max": quota + " 100000"}
	} else {
		files = map[string]string{"memory.limit_in_bytes": strconv.FormatInt(lim.MemoryBytes, 10),
			"pids.max": strconv.FormatInt(lim.Pids, 10), "cpu.cfs_quota_us": quota}
	}
	for _, d := range cgroupDirs(path) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		for f, v := range files {
			p := filepath.Join(d, f)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				return fmt.Errorf("cgroup %s = %s: %w", p, v, err)
			}
		}
	}
	return nil
}

func addToCgroup(path string, pid int) error {
	for _, d := range cgroupDirs(path) {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: add pid %d: %w", d, pid, err)
		}
	}
	return nil
}

// removeCgroup removes path everywhere; absent is fine.
func removeCgroup(path string) error {
	var errs []error
	for _, d := range cgroupDirs(path) {
		var err error
		for i := 0; i < 40; i++ { // a just-killed process may linger for a moment
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// readStats reads usage of path.
func readStats(path string) (runtime.Stats, error) {
	st := runtime.Stats{Time: time.Now()}
	var err error
	if cgroup2Only() {
		d := filepath.Join(cgroupRoot, path)
		if st.MemoryBytes, err = readUint(filepath.Join(d, "memory.current")); err != nil {
			return st, err
		}
		st.MemoryLimit, _ = readUint(filepath.Join(d, "memory.max"))
		st.Pids, _ = readUint(filepath.Join(d, "pids.current"))
		if usec, err := readKey(filepath.Join(d, "cpu.stat"), "usage_usec"); err == nil {
			st.CPUUsageNs = usec * 1000
		}
		return st, nil
	}
	if st.MemoryBytes, err = readUint(filepath.Join(cgroupRoot, "memory", path, "memory.usage_in_bytes")); err != nil {
		return st, err
	}
	st.MemoryLimit, _ = readUint(filepath.Join(cgroupRoot, "memory", path, "memory.limit_in_bytes"))
	st.CPUUsageNs, _ = readUint(filepath.Join(cgroupRoot, "cpuacct", path, "cpuacct.usage"))
	st.Pids, _ = readUint(filepath.Join(cgroupRoot, "pids", path, "pids.current"))
	return st, nil
}

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

func readKey(p, key string) (uint64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
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
