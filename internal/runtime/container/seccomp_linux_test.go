package container

import (
	"context"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/runtime"
)

// ioUringScript calls io_uring_setup(8, params) and prints the result and errno.
const ioUringScript = `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
r = libc.syscall(425, 8, params)
print(r, ctypes.get_errno())
`

// TestIoUringDenied: root inside a sandbox gets EPERM from io_uring_setup,
// which the host itself allows (else the test would prove nothing).
func TestIoUringDenied(t *testing.T) {
	var params [120]byte
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 8, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		t.Logf("the host refuses io_uring_setup too (%v): the sandbox's EPERM is checked anyway", errno)
	} else {
		unix.Close(int(fd))
	}
	r := newTestRuntime(t, "")
	rootfs := baseTemplateRootfs(t)
	id := newID()
	if _, err := r.Create(context.Background(), runtime.Spec{ID: id, RootfsDir: rootfs}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill(context.Background(), id) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := r.oci.output(r.oci.command(ctx, "exec", r.containerName(id), "python3", "-c", ioUringScript))
	if err != nil {
		t.Fatalf("script: %v %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "-1 1" {
		t.Fatalf("io_uring_setup in the sandbox = %q, want \"-1 1\" (EPERM)", got)
	}
}
