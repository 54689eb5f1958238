//go:build unix

package qmp

import "syscall"

func unixRights(fd int) []byte { return syscall.UnixRights(fd) }
