//go:build !linux

package cloexec

import "syscall"

// markInherited uses the portable loop: every descriptor up to the soft
// RLIMIT_NOFILE that is open gets FD_CLOEXEC.
func markInherited() error {
	var lim syscall.Rlimit
	n := uint64(1024)
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < 1<<16 {
		n = lim.Cur
	}
	for fd := 3; uint64(fd) < n; fd++ {
		syscall.CloseOnExec(fd)
	}
	return nil
}
