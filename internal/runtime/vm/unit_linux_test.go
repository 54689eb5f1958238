package vm

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
)

func TestMachineArgs(t *testing.T) {
	base := machine{Name: "moat-x", Accel: "tcg", TSCkHz: 2096007, VCPUs: 2, MemMiB: 256, Kernel: "/k", Initramfs: "/i",
		Disk: "/d.qcow2", MemPath: "/m", QMP: "/q.sock", Console: "/c.sock", PidFile: "/p"}
	for _, tc := range []struct {
		name    string
		mod     func(m *machine)
		want    []string // substrings of the joined command line
		notWant []string
	}{
		{name: "template boot", mod: func(m *machine) { m.MemShared = true },
			want: []string{"-accel tcg,tb-size=128 -cpu max", "share=on", "-M microvm,memory-backend=mem0", "tsc_early_khz=2096007",
				"-no-reboot", "reboot=t", "spawn=deny",
				"-chardev socket,id=con0,path=/c.sock,server=on,wait=on -serial chardev:con0", "ifname=tap0", "mac=" + guestMAC, "-smp 2 -m 256"},
			notWant: []string{"-incoming"}},
		{name: "restore", mod: func(m *machine) { m.Incoming, m.MemShared = true, true }, want: []string{"share=on", "-S -incoming defer"}},
		{name: "private memory", mod: func(m *machine) {}, want: []string{"share=off"}},
		{name: "kvm", mod: func(m *machine) { m.Accel = "kvm" }, want: []string{"-accel kvm -cpu host"}, notWant: []string{"tb-size"}},
		{name: "no tsc", mod: func(m *machine) { m.TSCkHz = 0 }, notWant: []string{"tsc_early_khz"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			tc.mod(&m)
			got := strings.Join(m.args(), " ")
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

func TestModuleOrder(t *testing.T) {
	dir := t.TempDir()
	dep := "kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/drivers/virtio/virtio.ko:\nkernel/drivers/virtio/virtio_ring.ko:\n" +
		"kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko\n" +
		"kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko\nkernel/net/core/failover.ko:\n"
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		builtin string
		want    []string
		wantErr bool
	}{
		{name: "ext4 built in", builtin: "kernel/fs/ext4/ext4.ko\n", want: []string{
			"kernel/drivers/virtio/virtio_ring.ko", "kernel/drivers/virtio/virtio.ko", "kernel/drivers/virtio/virtio_mmio.ko",
			"kernel/drivers/block/virtio_blk.ko", "kernel/net/core/failover.ko", "kernel/drivers/net/net_failover.ko",
			"kernel/drivers/net/virtio_net.ko"}},
		{name: "no ext4 at all", builtin: "", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte(tc.builtin), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := moduleOrder(dir, guestModules)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("order = %q\nwant    %q", got, tc.want)
			}
		})
	}
}

func TestTemplateKeyAndID(t *testing.T) {
	root := filepath.Join(t.TempDir(), "base", "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	k1 := templateKey(runtime.Spec{TemplateID: "Base/1", RootfsDir: root})
	if !strings.HasPrefix(k1, "base_1-") {
		t.Fatalf("key %q", k1)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(root), "stamp.json"), []byte(`{"build":"2"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if k2 := templateKey(runtime.Spec{TemplateID: "Base/1", RootfsDir: root}); k2 == k1 {
		t.Fatal("a new stamp.json did not change the key")
	}
	for _, tc := range []struct {
		id string
		ok bool
	}{{"abc123", true}, {"", false}, {"a-b", false}, {"ABC", false}, {strings.Repeat("a", 41), false}} {
		if err := validID(tc.id); (err == nil) != tc.ok {
			t.Errorf("validID(%q) = %v", tc.id, err)
		}
	}
}

func TestDiskTarget(t *testing.T) {
	const have = int64(300) << 20
	for _, c := range []struct {
		mib     int
		want    int64
		invalid bool
	}{{0, 0, false}, {300, 0, false}, {4096, 4096 << 20, false}, {299, 0, true}} {
		got, err := diskTarget(runtime.Spec{DiskMiB: c.mib}, have)
		if got != c.want || errdefs.IsInvalidArgument(err) != c.invalid {
			t.Errorf("diskTarget(%d MiB) = %d, %v", c.mib, got, err)
		}
	}
}
