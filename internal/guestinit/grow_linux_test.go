package guestinit

import "testing"

func TestDiskResized(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want bool
	}{
		{"change@/devices/platform/virtio-mmio.0/virtio0/block/vda\x00ACTION=change\x00DEVNAME=vda\x00RESIZE=1\x00", true},
		{"change@/devices/platform/virtio-mmio.1/virtio1/block/vdb\x00ACTION=change\x00RESIZE=1\x00", false},
		{"change@/devices/platform/virtio-mmio.0/virtio0/block/vda\x00ACTION=change\x00DISK_MEDIA_CHANGE=1\x00", false},
		{"add@/devices/platform/virtio-mmio.0/virtio0/block/vda\x00ACTION=add\x00RESIZE=1\x00", false},
		{"libudev\x00garbage", false},
	} {
		if got := diskResized([]byte(c.msg), "/vda"); got != c.want {
			t.Errorf("diskResized(%q) = %v, want %v", c.msg, got, c.want)
		}
	}
}
