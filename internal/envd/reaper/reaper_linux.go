// Package reaper lets envd be PID 1 of a sandbox without a second process:
// it reaps the orphans that the kernel hands to PID 1, and leaves alone the
// children that envd itself waits for (through os/exec).
//
// The two kinds are told apart by pidfds: on Linux ≥ 5.4 os/exec creates
// every child together with a pidfd (CLONE_PIDFD) and holds it until its
// Wait has reaped the child; an orphan was never our child, so we hold no
// pidfd for it. A pass lists our zombie children first, then the PIDs of
// our open pidfds, and reaps the zombies without one. A child started
// after the listing is not in it; one in the listing had its pidfd from
// its birth, so its exit status stays for its Wait.
package reaper

import (
	"bytes"
	"errors"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Supported reports whether os/exec gives this process's children pidfds
// that Wait uses (pidfd_open and waitid(P_PIDFD) work, as os/exec checks
// them). Without them Start would take the exit status of envd's own
// children; PID 1 then re-executes itself as a child instead.
func Supported() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	// Our own process is no child of ours: ECHILD means P_PIDFD is known.
	if err := unix.Waitid(unix.P_PIDFD, fd, nil, unix.WEXITED|unix.WNOHANG, nil); err != unix.ECHILD {
		return false
	}
	return unix.PidfdSendSignal(fd, 0, nil, 0) == nil
}

// Start reaps orphaned zombies now and on every SIGCHLD until the process
// exits; it returns at once.
func Start() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	Reap()
	go func() {
		for range sigs {
			Reap()
		}
	}()
}

// Reap runs one pass and returns how many orphans it reaped.
func Reap() int {
	if !anyExited() {
		return 0
	}
	zombies := zombieChildren()
	if len(zombies) == 0 {
		return 0
	}
	own := pidfdPIDs()
	n := 0
	for _, pid := range zombies {
		if own[pid] {
			continue
		}
		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
			n++
		}
	}
	return n
}

// anyExited says whether a child of this process has exited and not been
// waited for yet, leaving it so (WNOWAIT). Most passes find none (the one
// at envd's start, a SIGCHLD whose child os/exec's Wait took first) and
// then list nothing in /proc: that listing was ~0.5 ms of each sandbox's
// start. An error other than "no children" counts as yes.
func anyExited() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if errors.Is(err, unix.ECHILD) {
		return false
	}
	return err != nil || info.Signo != 0
}

// zombieChildren lists this process's children (of every thread) that have exited.
// It names each thread's children file itself: a glob of
// /proc/self/task/*/children lists every thread's directory, and the
// kernel makes an inode for each of its ~50 entries (a tenth of envd's
// CPU in a burst of sandbox starts, where each SIGCHLD runs a pass).
func zombieChildren() []int {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return nil
	}
	tids, _ := d.Readdirnames(-1)
	d.Close()
	var out []int
	for _, tid := range tids {
		b, err := os.ReadFile("/proc/self/task/" + tid + "/children")
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(field)
			if err == nil && isZombie(pid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// isZombie reads the state in /proc/PID/stat ("pid (comm) Z ...").
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// pidfdPIDs returns the PIDs that this process holds pidfds for.
func pidfdPIDs() map[int]bool {
	ents, err := os.ReadDir("/proc/self/fd")
	out := map[int]bool{}
	if err != nil {
		return out
	}
	for _, e := range ents {
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); link != "anon_inode:[pidfd]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "Pid:"); ok {
				if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && pid > 0 {
					out[pid] = true
				}
			}
		}
	}
	return out
}
