package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// runInit is PID 1's job where package reaper cannot tell envd's own
// children from orphans (no pidfds): start envd again as a child, forward
// termination signals to it, and reap every zombie (orphans reparent to
// PID 1) until the child exits; it returns the child's exit code.
func runInit() int {
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	child, err := os.StartProcess(exe, os.Args, &os.ProcAttr{
		Env:   append(os.Environ(), childEnv+"=1"),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "envd: start child:", err)
		return 1
	}
	go func() {
		for s := range sigs {
			_ = child.Signal(s)
		}
	}()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "envd: wait:", err)
			return 1
		}
		if pid != child.Pid {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}
