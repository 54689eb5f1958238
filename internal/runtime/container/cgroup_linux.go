package container

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

// isCgroup2Only reports a pure cgroup v2 host.
func isCgroup2Only() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// readStats reads usage from cgroup v1 hierarchies, or v2 on a v2-only host.
func readStats(path string) (runtime.Stats, error) {
	st := runtime.Stats{Time: time.Now()}
	var err error
	if isCgroup2Only() {
		d := filepath.Join(cgroupRoot, path)
		st.MemoryBytes, err = readUint(filepath.Join(d, "memory.current"))
		if err != nil {
			return st, err
		}
		st.MemoryLimit, _ = readUint(filepath.Join(d, "memory.max")) // "max" reads as 0
		st.Pids, _ = readUint(filepath.Join(d, "pids.current"))
		if usec, err := readKey(filepath.Join(d, "cpu.stat"), "usage_usec"); err == nil {
			st.CPUUsageNs = usec * 1000
		}
		return st, nil
	}
	st.MemoryBytes, err = readUint(filepath.Join(cgroupRoot, "memory", path, "memory.usage_in_bytes"))
	if err != nil {
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

// removeCgroups removes the sandbox's cgroup in every hierarchy; absent is fine.
func removeCgroups(path string) error {
	dirs := []string{filepath.Join(cgroupRoot, path)}
	entries, _ := os.ReadDir(cgroupRoot)
	for _, e := range entries {
		if e.IsDir() { // controllers mounted as dirs; the cpu → cpu,cpuacct symlinks are skipped
			dirs = append(dirs, filepath.Join(cgroupRoot, e.Name(), path))
		}
	}
	var errs []error
	for _, d := range dirs {
		var err error
		for i := 0; i < 20; i++ { // a just-killed task may linger for a moment
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
