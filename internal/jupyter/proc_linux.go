package jupyter

import (
	"os/exec"
	"syscall"
)

// procAttr puts the kernel in its own process group and kills it with its
// parent.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

// killGroup SIGKILLs the kernel's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}

// interruptProcess sends SIGINT to the kernel process.
func interruptProcess(cmd *exec.Cmd) error {
	return cmd.Process.Signal(syscall.SIGINT)
}
