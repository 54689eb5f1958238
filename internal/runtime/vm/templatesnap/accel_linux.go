package templatesnap

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/guestinit"
	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
)

// resolveAccel decides the accelerator once: "auto" means KVM only when a
// probe guest boots with it.
func (t *Set) resolveAccel(ctx context.Context, bf *image.BootFiles) (string, error) {
	t.accelOnce.Do(func() {
		switch t.Accel {
		case "kvm", "tcg":
			t.accel = t.Accel
			t.Log.InfoContext(ctx, "accelerator", "accel", t.accel, "why", "configured")
			return
		}
		f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
		if err != nil {
			t.accel = "tcg"
			t.Log.InfoContext(ctx, "accelerator", "accel", "tcg", "why", "/dev/kvm unusable", "err", err)
			return
		}
		f.Close()
		if err := t.probeKVM(ctx, bf); err != nil {
			t.accel = "tcg"
			t.Log.WarnContext(ctx, "accelerator", "accel", "tcg", "why", "a probe guest did not boot with KVM", "err", err)
			return
		}
		t.accel = "kvm"
		t.Log.InfoContext(ctx, "accelerator", "accel", "kvm", "why", "probe guest booted")
	})
	return t.accel, t.accelErr
}

// probeKVM boots the guest kernel with KVM into the initramfs only, which
// prints guestinit.ProbeMarker and powers off.
func (t *Set) probeKVM(ctx context.Context, bf *image.BootFiles) error {
	dir, err := os.MkdirTemp(t.Dir, ".probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m := &qemu.Machine{Accel: "kvm", TSCkHz: t.TSCkHz}
	// The serial port and QEMU's messages share stdout, kept in a ring:
	// bounded whatever the guest prints.
	args := []string{"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-accel", "kvm", "-cpu", "host",
		"-m", "256", "-M", "microvm", "-serial", "stdio", "-kernel", bf.Kernel, "-initrd", bf.Initramfs,
		"-append", m.KernelArgs() + " " + guestinit.ArgProbe + "=1"}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.Launcher.QEMU, args...)
	out := qemu.NewRing(qemu.ConsoleRing)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, out, out
	err = cmd.Run()
	if b := out.Tail(qemu.ConsoleRing); strings.Contains(string(b), guestinit.ProbeMarker) {
		return nil
	}
	return fmt.Errorf("kvm probe: %v: %s", err, out.Tail(2048))
}
