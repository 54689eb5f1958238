package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Root is where the cgroup hierarchies are mounted.
const Root = "/sys/fs/cgroup"

// V2Only reports a pure cgroup v2 host (no v1 hierarchies).
func V2Only() bool {
	_, err := os.Stat(filepath.Join(Root, "cgroup.controllers"))
	return err == nil
}

// Dirs are the directories of path in each hierarchy Create limits: the
// memory, pids, cpu and cpuacct hierarchies on v1 (each once, as cpu and
// cpuacct may be links to one cpu,cpuacct mount), the unified tree on v2.
func Dirs(path string) []string {
	if V2Only() {
		return []string{filepath.Join(Root, path)}
	}
	var out []string
	seen := map[string]bool{}
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct"} {
		real, err := filepath.EvalSymlinks(filepath.Join(Root, c)) // cpu → cpu,cpuacct on some hosts
		if err == nil && !seen[real] {
			seen[real] = true
			out = append(out, filepath.Join(real, path))
		}
	}
	return out
}

// allDirs are the directories of path in every mounted hierarchy, as an OCI
// runtime creates a container's cgroup in all of them.
func allDirs(path string) []string {
	dirs := []string{filepath.Join(Root, path)}
	entries, _ := os.ReadDir(Root)
	for _, e := range entries {
		if e.IsDir() { // controllers mounted as dirs; the cpu → cpu,cpuacct symlinks are skipped
			dirs = append(dirs, filepath.Join(Root, e.Name(), path))
		}
	}
	return dirs
}

// Limits are what the processes of one cgroup may use.
type Limits struct {
	MemoryBytes int64
	Pids        int64
	CPUs        int
	// Background gives the cgroup the lowest CPU weight (see SetBackground).
	Background bool
}

// CPU weights: the lowest, for work that must yield to every sandbox
// (a warm-pool member being made), and the kernel's default.
const (
	sharesLow, sharesDefault = "2", "1024" // cgroup v1 cpu.shares
	weightLow, weightDefault = "1", "100"  // cgroup v2 cpu.weight
)

// cpuWeight is the CPU weight file and its value on this host.
func cpuWeight(background bool) (file, value string) {
	switch {
	case V2Only() && background:
		return "cpu.weight", weightLow
	case V2Only():
		return "cpu.weight", weightDefault
	case background:
		return "cpu.shares", sharesLow
	default:
		return "cpu.shares", sharesDefault
	}
}

// SetBackground gives path the lowest CPU weight (background) or the
// default one back: under contention its processes then run only on what
// other cgroups leave.
func SetBackground(path string, background bool) error {
	f, v := cpuWeight(background)
	for _, d := range Dirs(path) {
		p := filepath.Join(d, f)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			return fmt.Errorf("cgroup %s = %s: %w", p, v, err)
		}
	}
	return nil
}

// Create makes path in every hierarchy of Dirs and writes lim to the limit
// files the host has.
func Create(path string, lim Limits) error {
	quota := strconv.Itoa(lim.CPUs * 100000)
	var files map[string]string
	if V2Only() {
		files = map[string]string{"memory.max": strconv.FormatInt(lim.MemoryBytes, 10),
			"pids.max": strconv.FormatInt(lim.Pids, 10), "cpu.max": quota + " 100000"}
	} else {
		files = map[string]string{"memory.limit_in_bytes": strconv.FormatInt(lim.MemoryBytes, 10),
			"pids.max": strconv.FormatInt(lim.Pids, 10), "cpu.cfs_quota_us": quota}
	}
	if lim.Background {
		f, v := cpuWeight(true)
		files[f] = v
	}
	for _, d := range Dirs(path) {
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

// AddPID moves process pid into path in every hierarchy of Dirs.
func AddPID(path string, pid int) error {
	for _, d := range Dirs(path) {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: add pid %d: %w", d, pid, err)
		}
	}
	return nil
}

// Remove removes path from the hierarchies of Dirs; absent is fine.
func Remove(path string) error { return removeDirs(Dirs(path)) }

// RemoveStray removes the empty child cgroups of parent that keep does not
// keep (by name); the parent may be shared with other backends, so
// cgroups with processes stay.
func RemoveStray(parent string, keep func(name string) bool) error {
	var errs []error
	for _, d := range Dirs(parent) {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if !e.IsDir() || keep(e.Name()) {
				continue
			}
			if procs, err := os.ReadFile(filepath.Join(d, e.Name(), "cgroup.procs")); err == nil && len(procs) == 0 {
				errs = append(errs, Remove(parent+"/"+e.Name()))
			}
		}
	}
	return errors.Join(errs...)
}

// RemoveAll removes path from every mounted hierarchy (where an OCI runtime
// creates it); absent is fine.
func RemoveAll(path string) error { return removeDirs(allDirs(path)) }

// removeBusyFor is how long removeDirs retries a cgroup the kernel still
// reports busy. A just-killed process lingers for a moment, and for
// seconds on a loaded host (a burst of kills while the CPUs are saturated
// left cgroups, and then the mounts their processes held, behind a 0.4 s
// budget: TestSlotsUnderRace in CI).
const removeBusyFor = 10 * time.Second

// removeDirs removes each cgroup directory, retrying while the kernel still
// reports it busy.
func removeDirs(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		var err error
		deadline, pause := time.Now().Add(removeBusyFor), 5*time.Millisecond
		for {
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				break
			}
			time.Sleep(pause)
			pause = min(2*pause, 100*time.Millisecond)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
