package qemu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/jail"
	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/guestnet"
)

// Machine is one QEMU invocation. Everything that is part of the migrated
// device state (machine, CPUs, memory size, devices and their order) must
// be identical between the template boot and its restores.
type Machine struct {
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

// KernelArgs is the guest command line. Baked into the snapshot: restores
// do not boot, so it only matters for the template boot.
func (m *Machine) KernelArgs() string {
	// panic=-1 reboot=t: a guest panic reboots at once through a triple
	// fault (no ACPI/keyboard-controller attempts, which can spin under
	// TCG), and -no-reboot turns the reboot into QEMU exiting.
	a := []string{"console=ttyS0", "quiet", "panic=-1", "reboot=t", "rdinit=/init",
		"cryptomgr.notests", "initcall_blacklist=init_kprobe_trace,load_system_certificate_list",
		"mitigations=off", "no_timer_check", "random.trust_cpu=on",
		"moat.addr=" + guestnet.GuestAddr.String() + "/" + strconv.Itoa(guestnet.GuestPrefix), "moat.gw=" + guestnet.TapAddr.String(),
		"moat.addr6=" + guestnet.GuestAddr6.String() + "/" + strconv.Itoa(guestnet.GuestPrefix6), "moat.gw6=" + guestnet.TapAddr6.String()}
	if m.Accel == "tcg" {
		// No ASLR in TCG guests: QEMU 7.2's TCG caches a translation under
		// the guest's virtual address, so every process whose libraries
		// and PIE executable land elsewhere translates them anew (measured
		// in a restored guest: `bash -l -c true` 61–72 → 34–39 ms, and
		// envd's process start the same way). Clones of one snapshot share
		// the template's layout anyway; under KVM nothing changes.
		a = append(a, "norandmaps")
		// tsc=reliable: the boot's TSC sync check between vCPUs fails
		// under TCG ("Marking TSC unstable due to TSCs unsynchronized"),
		// and the guest falls back to the jiffies clocksource: no
		// high-resolution timers and no tickless idle, so every idle vCPU
		// takes 250 timer interrupts a second, which TCG emulates at ~8 %
		// of a host core per idle 2-vCPU guest (20 idle microVMs: 1.6 of
		// this 2-core host's cores). QEMU's TCG TSC is one clock for all
		// vCPUs (the host's, paused while the VM is stopped and carried in
		// the migration stream), so it is safe to trust.
		a = append(a, "tsc=reliable")
	}
	if m.TSCkHz > 0 {
		// microvm has no HPET or PM timer: without this the TSC calibration
		// against the PIT fails under TCG and the boot hangs.
		a = append(a, "tsc_early_khz="+strconv.Itoa(m.TSCkHz))
	}
	return strings.Join(a, " ")
}

// Args is the QEMU command line.
func (m *Machine) Args() []string {
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
		"-kernel", m.Kernel, "-initrd", m.Initramfs, "-append", m.KernelArgs(),
		"-drive", "file=" + m.Disk + ",format=qcow2,if=none,id=d0,cache=unsafe,discard=unmap",
		"-device", "virtio-blk-device,drive=d0",
		"-netdev", "tap,id=n0,ifname=" + guestnet.TapName + ",script=no,downscript=no",
		"-device", "virtio-net-device,netdev=n0,mac=" + guestnet.GuestMAC,
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

// Proc is a running QEMU: this process's child (done, status), or one
// adopted after a restart (pidfd).
type Proc struct {
	Pid    int
	done   chan struct{}      // closed when it exited (own child) — nil for adopted processes
	status runtime.ExitStatus // how it exited; set before done is closed
	pidfd  *runtime.Process   // adopted processes: watched through a pidfd
	Con    *Console           // its serial port; nil until connected
}

// Start runs QEMU jailed by jc (see jail_linux.go), or, with a nil jc, as
// root inside the network namespace nsPath (nsenter execs, so the PID is
// QEMU's), logging to logPath. QEMU inherits stdin (/dev/null), stdout and
// stderr (the log) and no other descriptor.
func Start(qemu, nsPath, logPath string, m *Machine, jc *jail.Config) (*Proc, error) {
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
		args := append([]string{"--net=" + nsPath, "--", qemu}, m.Args()...)
		cmd = exec.Command("nsenter", args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	p := &Proc{Pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.status = exitStatus(cmd.ProcessState)
		close(p.done)
	}()
	return p, nil
}

// exitStatus says how a child ended.
func exitStatus(ps *os.ProcessState) runtime.ExitStatus {
	st := runtime.ExitStatus{Code: ps.ExitCode()}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		st.Signal = int(ws.Signal())
	}
	return st
}

// Alive reports whether p still runs.
func (p *Proc) Alive() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	return !p.pidfd.Exited()
}

// WaitCtx blocks until p exited (its status: the exit code is unknown for
// an adopted process) or ctx ended (ctx.Err()).
func (p *Proc) WaitCtx(ctx context.Context) (runtime.ExitStatus, error) {
	if p.done != nil {
		select {
		case <-p.done:
			return p.status, nil
		case <-ctx.Done():
			return runtime.ExitStatus{}, ctx.Err()
		}
	}
	if err := p.pidfd.Wait(ctx); err != nil {
		return runtime.ExitStatus{}, err
	}
	return runtime.ExitStatus{Code: -1}, nil
}

// wait blocks until p exited or d passed; it reports whether it exited.
func (p *Proc) wait(d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := p.WaitCtx(ctx)
	return err == nil
}

// Stop asks QEMU to quit over QMP (c may be nil), then SIGKILLs it.
func (p *Proc) Stop(ctx context.Context, c *qmp.Client) error {
	defer p.Con.Close()
	if p.pidfd != nil {
		defer p.pidfd.Close()
	}
	if !p.Alive() {
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
	if err := syscall.Kill(p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill qemu %d: %w", p.Pid, err)
	}
	if !p.wait(5 * time.Second) {
		return fmt.Errorf("qemu %d survived SIGKILL", p.Pid)
	}
	return nil
}

// HostTSCkHz is the host TSC frequency from /proc/cpuinfo ("cpu MHz"); 0 if unknown.
func HostTSCkHz() int {
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

// Adopt returns the QEMU of sandbox directory dir from its pidfile when
// that process still runs with dir on its command line (no PID reuse).
func Adopt(dir string) *Proc {
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(cmdline), dir+"/") {
		return nil
	}
	// The command line names dir: pid is this sandbox's QEMU, now held
	// by the pidfd against reuse.
	pfd, err := runtime.OpenProcess(pid)
	if err != nil {
		return nil
	}
	p := &Proc{Pid: pid, pidfd: pfd}
	if !p.Alive() {
		_ = pfd.Close()
		return nil
	}
	return p
}

// ConsoleLog is where m's console output is mirrored (capped, see console_linux.go).
func ConsoleLog(m *Machine) string { return filepath.Join(filepath.Dir(m.Console), "console.log") }

// TailFile returns the last n bytes of a file, for error messages.
func TailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(fi.Size()-n, 0)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return string(b[:k])
}
