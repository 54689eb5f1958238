package density

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// What moat bench --density reads from the host: /proc/meminfo, every
// process's memory (status and smaps_rollup), the sandboxes' cgroups and
// the microVMs' memory files.

// hostSample is the host's memory at one moment.
type hostSample struct {
	mem   map[string]int64 // /proc/meminfo, kB
	self  procMem          // this process: the server and the benchmark's client
	procs map[int]procMem
}

// procMem is one process's memory, kB.
type procMem struct {
	comm                     string
	cgroup                   string // its memory cgroup path
	rss, anon, file, shm     int64  // VmRSS, RssAnon, RssFile, RssShmem
	pss                      int64  // smaps_rollup Pss
	guestRss, guestPss       int64  // QEMU: its guest-RAM mapping (memory-backend-file)
	guestSize                int64  // QEMU: that mapping's size
	isQEMU, isEnvd, isServer bool
}

func readHost() hostSample {
	h := hostSample{mem: readKV("/proc/meminfo"), procs: map[int]procMem{}}
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readProc(pid)
		if !ok {
			continue
		}
		if pid == self {
			p.isServer = true
			h.self = p
		}
		h.procs[pid] = p
	}
	return h
}

// readProc reads one process; false if it is gone or a kernel thread.
func readProc(pid int) (procMem, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	st := readKV(dir + "/status")
	if st["VmRSS"] == 0 {
		return procMem{}, false
	}
	comm, _ := os.ReadFile(dir + "/comm")
	p := procMem{comm: strings.TrimSpace(string(comm)), rss: st["VmRSS"], anon: st["RssAnon"],
		file: st["RssFile"], shm: st["RssShmem"], pss: readKV(dir + "/smaps_rollup")["Pss"]}
	p.cgroup = memoryCgroup(dir + "/cgroup")
	p.isEnvd = p.comm == "envd"
	if strings.HasPrefix(p.comm, "qemu-system") {
		p.isQEMU = true
		p.guestSize, p.guestRss, p.guestPss = guestMapping(dir + "/smaps")
	}
	return p, true
}

// readKV reads "Key: value [kB]" lines (meminfo, status, smaps_rollup).
func readKV(path string) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		if f := strings.Fields(v); len(f) > 0 {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				out[k] = n
			}
		}
	}
	return out
}

// memoryCgroup returns the process's memory cgroup (v1 "memory"
// controller line, else the v2 "0::" line).
func memoryCgroup(path string) string {
	b, _ := os.ReadFile(path)
	v2 := ""
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "memory" {
				return f[2]
			}
		}
		if f[0] == "0" {
			v2 = f[2]
		}
	}
	return v2
}

// guestMapping finds QEMU's guest RAM in its smaps: the largest shared
// file mapping named .../mem (the memory-backend-file) and returns its
// size, Rss and Pss (kB).
func guestMapping(path string) (size, rss, pss int64) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	in := false
	var cur [3]int64
	best := [3]int64{}
	for sc.Scan() {
		l := sc.Bytes()
		if isMappingHeader(l) {
			if in && cur[0] > best[0] {
				best = cur
			}
			fs := bytes.Fields(l)
			in = len(fs) >= 6 && bytes.HasSuffix(fs[5], []byte("/mem"))
			cur = [3]int64{}
			continue
		}
		if !in {
			continue
		}
		k, v, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(string(bytes.Fields(v)[0]), 10, 64)
		switch string(k) {
		case "Size":
			cur[0] = n
		case "Rss":
			cur[1] = n
		case "Pss":
			cur[2] = n
		}
	}
	if in && cur[0] > best[0] {
		best = cur
	}
	return best[0], best[1], best[2]
}

// isMappingHeader: smaps mapping lines start with "start-end ".
func isMappingHeader(l []byte) bool {
	sp := bytes.IndexByte(l, ' ')
	return sp > 0 && bytes.IndexByte(l[:sp], '-') > 0 && !bytes.HasSuffix(l[:sp], []byte(":"))
}

// cgroupMemory is one sandbox cgroup's memory, kB.
type cgroupMemory struct{ usage, anon, file int64 }

// readCgroupMemory reads a sandbox cgroup (path as in /proc/PID/cgroup)
// under cgroup v1's memory controller or v2.
func readCgroupMemory(path string) cgroupMemory {
	for _, dir := range []string{"/sys/fs/cgroup/memory" + path, "/sys/fs/cgroup" + path} {
		if u, err := os.ReadFile(dir + "/memory.usage_in_bytes"); err == nil {
			st := readSpaceKV(dir + "/memory.stat")
			return cgroupMemory{usage: atoi64(u) >> 10, anon: st["total_rss"] >> 10, file: st["total_cache"] >> 10}
		}
		if u, err := os.ReadFile(dir + "/memory.current"); err == nil {
			st := readSpaceKV(dir + "/memory.stat")
			return cgroupMemory{usage: atoi64(u) >> 10, anon: st["anon"] >> 10, file: st["file"] >> 10}
		}
	}
	return cgroupMemory{}
}

func readSpaceKV(path string) map[string]int64 {
	out := map[string]int64{}
	b, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			out[k] = atoi64([]byte(v))
		}
	}
	return out
}

func atoi64(b []byte) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// allocatedKiB is the disk space a (sparse) file takes, kB.
func allocatedKiB(path string) int64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks / 2
}

// sandboxMemory is what one sandbox costs, kB.
type sandboxMemory struct {
	runtime    string
	cg         cgroupMemory
	procs      []procMem // its processes (those in its cgroup)
	memFileKiB int64     // microVM: its memory file's allocated blocks
}

// readSandboxes reads every sandbox's cgroup and processes.
func readSandboxes(dataDir string, ms []member) []sandboxMemory {
	h := readHost()
	byID := map[string][]procMem{}
	for _, p := range h.procs {
		if i := strings.Index(p.cgroup, "/moat/"); i >= 0 {
			id, _, _ := strings.Cut(p.cgroup[i+len("/moat/"):], "/")
			byID[id] = append(byID[id], p)
		}
	}
	out := make([]sandboxMemory, 0, len(ms))
	for _, m := range ms {
		s := sandboxMemory{runtime: m.runtime, cg: readCgroupMemory("/moat/" + m.sb.ID), procs: byID[m.sb.ID]}
		if m.runtime == "vm" {
			s.memFileKiB = allocatedKiB(filepath.Join(dataDir, "vm", "sandboxes", m.sb.ID, "mem"))
		}
		out = append(out, s)
	}
	return out
}
