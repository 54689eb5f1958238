package image

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/testkit"
)

func TestModuleOrder(t *testing.T) {
	dir := t.TempDir()
	dep := "kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/drivers/virtio/virtio.ko:\nkernel/drivers/virtio/virtio_ring.ko:\n" +
		"kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko\n" +
		"kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko\nkernel/net/core/failover.ko:\n" +
		"kernel/fs/nfs/nfsv3.ko: kernel/fs/nfs/nfs.ko kernel/net/sunrpc/sunrpc.ko\n" +
		"kernel/fs/nfs/nfs.ko: kernel/net/sunrpc/sunrpc.ko\nkernel/net/sunrpc/sunrpc.ko:\n"
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
			"kernel/drivers/net/virtio_net.ko", "kernel/net/sunrpc/sunrpc.ko", "kernel/fs/nfs/nfs.ko", "kernel/fs/nfs/nfsv3.ko"}},
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

// TestGuestKernelModules checks the guest kernel installed here: every
// module the guests need resolves, NFSv3's after its dependencies.
func TestGuestKernelModules(t *testing.T) {
	_, version, err := FindKernel("")
	testkit.RequireNoErr(t, err, "no guest kernel installed here")
	order, err := moduleOrder(filepath.Join("/lib/modules", version), guestModules)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, p := range order {
		pos[modName(p)] = i
	}
	for _, m := range []string{"sunrpc", "lockd", "grace", "nfs", "nfsv3"} {
		if _, ok := pos[m]; !ok {
			t.Errorf("%s is not loaded (order %v)", m, order)
		}
	}
	if pos["nfsv3"] < pos["nfs"] || pos["nfs"] < pos["sunrpc"] || pos["nfs"] < pos["lockd"] {
		t.Errorf("NFS modules out of order: %v", order)
	}
}

func TestDiskTarget(t *testing.T) {
	const have = int64(300) << 20
	for _, c := range []struct {
		mib     int
		want    int64
		invalid bool
	}{{0, 0, false}, {300, 0, false}, {4096, 4096 << 20, false}, {299, 0, true}} {
		got, err := DiskTarget(runtime.Spec{DiskMiB: c.mib}, have)
		if got != c.want || errdefs.IsInvalidArgument(err) != c.invalid {
			t.Errorf("DiskTarget(%d MiB) = %d, %v", c.mib, got, err)
		}
	}
}
