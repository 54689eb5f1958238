//go:build !linux

package jupyter

import (
	"os"
	"os/exec"
	"syscall"
)

func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

func interruptProcess(cmd *exec.Cmd) error { return cmd.Process.Signal(os.Interrupt) }
