package qemu

import (
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/runtime/vm/guestnet"
)

func TestMachineArgs(t *testing.T) {
	base := Machine{Name: "moat-x", Accel: "tcg", TSCkHz: 2096007, VCPUs: 2, MemMiB: 256, Kernel: "/k", Initramfs: "/i",
		Disk: "/d.qcow2", MemPath: "/m", QMP: "/q.sock", Console: "/c.sock", PidFile: "/p"}
	for _, tc := range []struct {
		name    string
		mod     func(m *Machine)
		want    []string // substrings of the joined command line
		notWant []string
	}{
		{name: "template boot", mod: func(m *Machine) { m.MemShared = true },
			want: []string{"-accel tcg,tb-size=128 -cpu max", "share=on", "-M microvm,memory-backend=mem0", "tsc_early_khz=2096007",
				"-no-reboot", "reboot=t", "spawn=deny", "norandmaps", "tsc=reliable",
				"-chardev socket,id=con0,path=/c.sock,server=on,wait=on -serial chardev:con0", "ifname=tap0", "mac=" + guestnet.GuestMAC, "-smp 2 -m 256"},
			notWant: []string{"-incoming"}},
		{name: "restore", mod: func(m *Machine) { m.Incoming, m.MemShared = true, true }, want: []string{"share=on", "-S -incoming defer"}},
		{name: "private memory", mod: func(m *Machine) {}, want: []string{"share=off"}},
		{name: "kvm", mod: func(m *Machine) { m.Accel = "kvm" }, want: []string{"-accel kvm -cpu host"}, notWant: []string{"tb-size", "norandmaps", "tsc=reliable"}},
		{name: "no tsc", mod: func(m *Machine) { m.TSCkHz = 0 }, notWant: []string{"tsc_early_khz"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			tc.mod(&m)
			got := strings.Join(m.Args(), " ")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("args lack %q:\n%s", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("args contain %q:\n%s", w, got)
				}
			}
		})
	}
}
