package guestinit

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// limitUserTasks sets RLIMIT_NPROC, which envd and everything it starts
// inherit, to userTasks of the guest's memory. The kernel's default
// (threads-max/2, 2048 in a 512 MiB guest) lets a fork bomb fill the
// guest's memory long before it is reached, and the OOM killer then picks
// the largest process, envd, so the sandbox stops answering for good.
// envd runs as root, which RLIMIT_NPROC does not stop; a bomb run as any
// other account stops at the limit with memory to spare. A bomb run as
// root is not held back (docs/threat-model.md), as in a container.
func limitUserTasks() {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return
	}
	defer f.Close()
	if n := userTasks(f); n > 0 {
		_ = unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n})
	}
}

// userTasks is the task limit for a guest whose /proc/meminfo is r: one
// task (process or thread) per MiB of memory, at least 64; 0 when
// MemTotal is missing. A sleeping shell costs well under half a MiB, so
// that many stay within memory.
func userTasks(r io.Reader) uint64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "MemTotal:" {
			continue
		}
		kib, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return 0
		}
		return max(kib>>10, 64)
	}
	return 0
}
