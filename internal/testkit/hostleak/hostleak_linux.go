// Package hostleak lists what killed sandboxes left on the host. Every
// host object Moat makes for a sandbox is named after its ID (design
// rule), so a test that killed sandboxes asks here, once, for everything
// still named after one of them, instead of each test keeping its own
// partial list of places to look.
package hostleak

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/runtime"
)

// ifnameIDLen is how much of an ID a network interface's name keeps
// (IFNAMSIZ; package netpolicy).
const ifnameIDLen = 12

// Of returns the host objects still named after any of ids, each saying
// what it is: mounts, network namespaces and interfaces, cgroups, OCI
// runtime state under /run/moat, loop devices' backing files, sandbox
// directories of every backend under dataDir, and processes whose command
// line names one.
func Of(dataDir string, ids ...string) []string {
	var out []string
	has := func(s string) (string, bool) {
		for _, id := range ids {
			if strings.Contains(s, id) {
				return id, true
			}
		}
		return "", false
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if _, ok := has(l); ok {
				out = append(out, "mount: "+l)
			}
		}
	}
	for _, e := range readDir("/run/netns") {
		if _, ok := has(e); ok {
			out = append(out, "netns: "+e)
		}
	}
	for _, e := range readDir("/sys/class/net") {
		for _, id := range ids {
			if strings.HasSuffix(e, id[:min(len(id), ifnameIDLen)]) {
				out = append(out, "link: "+e)
			}
		}
	}
	for _, w := range []struct {
		root     string
		dirsOnly bool
	}{{"/sys/fs/cgroup", true}, {"/run/moat", false}} {
		walk(w.root, 4, w.dirsOnly, func(p string) {
			if _, ok := has(filepath.Base(p)); ok {
				out = append(out, "path: "+p)
			}
		})
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if b, err := os.ReadFile(l); err == nil {
			if _, ok := has(string(b)); ok {
				out = append(out, "loop device: "+strings.TrimSpace(string(b)))
			}
		}
	}
	for _, d := range runtime.SandboxDirs {
		for _, id := range ids {
			if p := filepath.Join(dataDir, d, id); exists(p) {
				out = append(out, "dir: "+p)
			}
		}
	}
	for _, p := range readDir("/proc") {
		if p[0] < '0' || p[0] > '9' {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", p, "cmdline")); err == nil {
			if _, ok := has(string(b)); ok {
				out = append(out, "process "+p+": "+strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")))
			}
		}
	}
	slices.Sort(out)
	return out
}

// WaitNone waits up to d until Of(dataDir, ids...) is empty (a kill's
// last steps, such as an autoclear loop device, may trail its answer)
// and fails t with what is left after that.
func WaitNone(t testing.TB, d time.Duration, dataDir string, ids ...string) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(d); ; time.Sleep(200 * time.Millisecond) {
		if left = Of(dataDir, ids...); len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Errorf("%s after the kill, %d host objects of %d sandboxes are left:\n%s",
		d, len(left), len(ids), strings.Join(left[:min(len(left), 40)], "\n"))
}

func readDir(dir string) []string {
	es, _ := os.ReadDir(dir)
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name()
	}
	return names
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// walk calls fn for every entry (every directory, with dirsOnly) under
// root down to depth levels.
func walk(root string, depth int, dirsOnly bool, fn func(string)) {
	if depth == 0 {
		return
	}
	es, _ := os.ReadDir(root)
	for _, e := range es {
		p := filepath.Join(root, e.Name())
		if e.IsDir() {
			fn(p)
			walk(p, depth-1, dirsOnly, fn)
		} else if !dirsOnly {
			fn(p)
		}
	}
}
