package vm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/jail"
	"github.com/moatsh/moat/internal/qmp"
)

// machine is one QEMU invocation. Everything that is part of the migrated
// device state (machine, CPUs, memory size, devices and their order) must
// be identical between the template boot and its restores.
type machine struct {
	Name      string
	Accel     string // "tcg" or "kvm"
	TSCkHz    int
	VCPUs     int
	MemMiB    int
	Kernel    string
	Initramfs string
	Disk      string // qcow2
	MemPath   string // memory-backend-file
	MemShared bool   // share=on: guest RAM lives in MemPath (else a private copy-on-write mapping of it)
	QMP       string // unix socket
	Console   string // serial port: unix socket QEMU listens on (see console_linux.go)
	PidFile   string
	Incoming  bool // wait for migrate-incoming
}

// kernelArgs is the guest command line. Baked into the snapshot: restores
// do not boot, so it only matters for the template boot.
func (m *machine) kernelArgs() string {
	// panic=-1 reboot=t: a guest panic reboots at once through a triple
	// fault (no ACPI/keyboard-controller attempts, which can spin under
	// TCG), and -no-reboot turns the reboot into QEMU exiting.
	a := []string{"console=ttyS0", "quiet", "panic=-1", "reboot=t", "rdinit=/init",
		"cryptomgr.notests", "initcall_blacklist=init_kprobe_trace,load_system_certificate_list",
		"mitigations=off", "no_timer_check", "random.trust_cpu=on",
		"moat.addr=" + guestAddr.String() + "/" + strconv.Itoa(guestPrefix), "moat.gw=" + tapAddr.String(),
		"moat.addr6=" + guestAddr6.String() + "/" + strconv.Itoa(guestPrefix6), "moat.gw6=" + tapAddr6.String()}
	if m.TSCkHz > 0 {
		// microvm has no HPET or PM timer: without this the TSC calibration
		// against the PIT fails under TCG and the boot hangs.
		a = append(a, "tsc_early_khz="+strconv.Itoa(m.TSCkHz))
	}
	return strings.Join(a, " ")
}

// args is the QEMU command line.
func (m *machine) args() []string {
	accel, cpu := "tcg,tb-size=128", "max"
	if m.Accel == "kvm" {
		accel, cpu = "kvm", "host"
	}
	share := "off"
	if m.MemShared {
		share = "on"
	}
	a := []string{
		"-name", m.Name, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-accel", accel, "-cpu", cpu, "-smp", strconv.Itoa(m.VCPUs), "-m", strconv.Itoa(m.MemMiB),
		"-object", fmt.Sprintf("memory-backend-file,id=mem0,size=%dM,mem-path=%s,share=%s", m.MemMiB, m.MemPath, share),
		"-M", "microvm,memory-backend=mem0",
		// wait=on: the guest does not start before Moat is connected.
		"-chardev", "socket,id=con0,path=" + m.Console + ",server=on,wait=on",
		"-serial", "chardev:con0",
		"-kernel", m.Kernel, "-initrd", m.Initramfs, "-append", m.kernelArgs(),
		"-drive", "file=" + m.Disk + ",format=qcow2,if=none,id=d0,cache=unsafe,discard=unmap",
		"-device", "virtio-blk-device,drive=d0",
		"-netdev", "tap,id=n0,ifname=" + tapName + ",script=no,downscript=no",
		"-device", "virtio-net-device,netdev=n0,mac=" + guestMAC,
		"-device", "virtio-rng-device",
		"-qmp", "unix:" + m.QMP + ",server=on,wait=off",
		"-pidfile", m.PidFile,
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	}
	if m.Incoming {
		// -S: the guest stays stopped after the state is loaded until
		// `cont`, whatever the saved run state says.
		a = append(a, "-S", "-incoming", "defer")
	}
	return a
}

// proc is a running QEMU.
type proc struct {
	pid  int
	done chan struct{} // closed when it exited (own child) — nil for adopted processes
	con  *console      // its serial port; nil until connected
}

// start runs QEMU jailed by jc (see jail_linux.go), or, with a nil jc, as
// root inside the network namespace nsPath (nsenter execs, so the PID is
// QEMU's), logging to logPath. QEMU inherits stdin (/dev/null), stdout and
// stderr (the log) and no other descriptor.
func start(qemu, nsPath, logPath string, m *machine, jc *jail.Config) (*proc, error) {
	// Root's file in a directory QEMU can write to: never follow a link.
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o640)
	if err != nil {
		return nil, fmt.Errorf("qemu log: %w", err)
	}
	defer logf.Close()
	var cmd *exec.Cmd
	if jc != nil {
		if cmd, err = jail.Command(jc); err != nil {
			return nil, err
		}
	} else {
		args := append([]string{"--net=" + nsPath, "--", qemu}, m.args()...)
		cmd = exec.Command("nsenter", args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	p := &proc{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// alive reports whether p still runs.
func (p *proc) alive() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	return syscall.Kill(p.pid, 0) == nil && !isZombie(p.pid)
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || len(s) < i+3 || s[i+2] == 'Z'
}

// wait blocks until p exited or d passed; it reports whether it exited.
func (p *proc) wait(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !p.alive() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		if p.done != nil {
			select {
			case <-p.done:
			case <-time.After(time.Until(deadline)):
			}
			continue
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop asks QEMU to quit over QMP (c may be nil), then SIGKILLs it.
func (p *proc) stop(ctx context.Context, c *qmp.Client) error {
	defer p.con.close()
	if !p.alive() {
		return nil
	}
	if c != nil {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = c.Execute(qctx, "quit", nil, nil)
		cancel()
		if p.wait(2 * time.Second) {
			return nil
		}
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill qemu %d: %w", p.pid, err)
	}
	if !p.wait(5 * time.Second) {
		return fmt.Errorf("qemu %d survived SIGKILL", p.pid)
	}
	return nil
}

// hostTSCkHz is the host TSC frequency from /proc/cpuinfo ("cpu MHz"); 0 if unknown.
func hostTSCkHz() int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(math.Round(mhz * 1000))
			}
		}
	}
	return 0
}
