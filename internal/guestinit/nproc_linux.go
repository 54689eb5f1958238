package guestinit

import "golang.org/x/sys/unix"

// limitUserTasks sets RLIMIT_NPROC, which envd and everything it starts
// inherit, to userTasks of the guest's memory. The kernel's default
// (threads-max/2, 2048 in a 512 MiB guest) lets a fork bomb fill the
// guest's memory long before it is reached, and the OOM killer then picks
// the largest process, envd, so the sandbox stops answering for good.
// envd runs as root, which RLIMIT_NPROC does not stop; a bomb run as any
// other account stops at the limit with memory to spare. A bomb run as
// root is not held back (docs/threat-model.md), as in a container.
func limitUserTasks() {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return
	}
	if n := userTasks(uint64(si.Totalram) * uint64(si.Unit)); n > 0 {
		_ = unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n})
	}
}

// userTasks is the task limit for a guest of memBytes of memory (MemTotal):
// one task (process or thread) per MiB, at least 64; 0 (no limit set) when
// the memory is unknown. A sleeping shell costs well under half a MiB, so
// that many stay within memory.
func userTasks(memBytes uint64) uint64 {
	if memBytes == 0 {
		return 0
	}
	return max(memBytes>>20, 64)
}
