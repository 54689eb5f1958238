// Package cloexec keeps descriptors a process inherited from its parent out
// of the processes it starts. Go opens its own files with O_CLOEXEC, but a
// descriptor inherited at exec (≥ 3: an operator's shell, a service manager,
// a test harness) is not close-on-exec and would reach every child: the OCI
// runtime, the container's init and envd, QEMU, helpers.
package cloexec

// MarkInherited sets FD_CLOEXEC on every descriptor ≥ 3 of the process.
// Call it first thing in main, before any goroutine starts a child.
// Descriptors ≥ 3 the program hands to a child on purpose must be passed
// through exec.Cmd.ExtraFiles, which clears the flag in the child only.
func MarkInherited() error { return markInherited() }
