package container

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container/oci"
	"github.com/moatsh/moat/internal/testkit"
)

// ioUringScript calls io_uring_setup(8, params) and prints the result and errno.
const ioUringScript = `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
r = libc.syscall(425, 8, params)
print(r, ctypes.get_errno())
`

// syscallScript calls syscall(nr, 0, 0) and prints the result and errno.
const syscallScript = `
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(ctypes.c_long(int(sys.argv[1], 0)), ctypes.c_long(int(sys.argv[2], 0)), ctypes.c_long(0))
print(r, ctypes.get_errno())
`

// TestSeccompDenied: root inside a sandbox gets the profile's answers,
// through the precompiled filter (run.oci.seccomp_bpf_data) when the OCI
// runtime is crun. io_uring_setup is checked against the host too, which
// allows it (else its EPERM would prove nothing).
func TestSeccompDenied(t *testing.T) {
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
	if r.oci.Name == "crun" {
		checkSeccompBPFLoaded(t, r, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	io, err := ociOutput(r.oci, r.oci.Command(ctx, "exec", r.containerName(id), "python3", "-c", ioUringScript))
	if err != nil || strings.TrimSpace(string(io)) != "-1 1" {
		t.Errorf("io_uring_setup in the sandbox = %q (%v), want \"-1 1\" (EPERM)", io, err)
	}
	for _, c := range []struct {
		name, nr, arg0, want string
	}{
		{"unshare(CLONE_NEWNS) EPERM", "272", "0x20000", "-1 1"},
		{"clone(CLONE_NEWUSER) EPERM", "56", "0x10000000", "-1 1"},
		{"mount EPERM", "165", "0", "-1 1"},
		{"clone3 ENOSYS", "435", "0", "-1 38"},
		{"getpid allowed", "39", "0", ""},
		// The x32 ABI (nr | 0x40000000): another architecture, killed (SIGSYS, 128+31).
		{"x32 getpid killed", "0x40000027", "0", "exit 159"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := ociOutput(r.oci, r.oci.Command(ctx, "exec", r.containerName(id), "sh", "-c",
				`python3 -c "$0" "$1" "$2" || echo exit $?`, syscallScript, c.nr, c.arg0))
			got := strings.TrimSpace(string(out))
			if err != nil || (c.want == "" && (strings.HasPrefix(got, "-1") || strings.HasPrefix(got, "exit"))) || (c.want != "" && got != c.want) {
				t.Errorf("syscall %s(%s) = %q (%v), want %q", c.nr, c.arg0, got, err, c.want)
			}
		})
	}
}

// checkSeccompBPFLoaded: the sandbox's bundle carries the precompiled
// filter, and it is what crun installed (crun writes the program it loads
// to <root>/<container>/seccomp.bpf).
func checkSeccompBPFLoaded(t *testing.T, r *Runtime, id string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir(id), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	want, err := base64.StdEncoding.DecodeString(s.Annotations[oci.SeccompBPFAnnotation])
	if err != nil || len(want) == 0 {
		t.Fatalf("config.json: no %s annotation (%v): crun compiles the profile per start", oci.SeccompBPFAnnotation, err)
	}
	if s.Linux == nil || s.Linux.Seccomp == nil {
		t.Fatal("config.json: linux.seccomp dropped")
	}
	got, err := os.ReadFile(filepath.Join(r.oci.Root, r.containerName(id), "seccomp.bpf"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("crun loaded %d bytes of BPF, the annotation has %d others", len(got), len(want))
	}
}

// TestSeccompBPFMatchesProfile: the annotation a sandbox gets is the
// program crun compiles for seccompProfile() now, not a stale cache.
func TestSeccompBPFMatchesProfile(t *testing.T) {
	testkit.RequireTool(t, "crun")
	r := newTestRuntime(t, "crun")
	s := ociSpec(runtime.Spec{ID: "iabc"}, "/proc/self/ns/net", "/moat/iabc", "", idmap.Range{})
	r.addSeccompBPF(context.Background(), s)
	got, err := base64.StdEncoding.DecodeString(s.Annotations[oci.SeccompBPFAnnotation])
	if err != nil || len(got) == 0 {
		t.Fatalf("no %s annotation (%v)", oci.SeccompBPFAnnotation, err)
	}
	want, err := r.oci.CompileSeccomp(context.Background(), seccompProfile())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("annotation: %d bytes of BPF, crun compiles %d others for the profile", len(got), len(want))
	}
	// The throwaway container's init must not outlive the compile.
	leftover := "moat-seccomp-" + strconv.Itoa(os.Getpid())
	deadline := time.Now().Add(5 * time.Second)
	for pid := processWith(leftover); pid != 0; pid = processWith(leftover) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d (%s) is left after CompileSeccomp", pid, leftover)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !reflect.DeepEqual(s.Linux.Seccomp, seccompProfile()) {
		t.Fatal("linux.seccomp is not the profile")
	}
}

// processWith returns a live process whose command line contains s, or 0.
func processWith(s string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) {
			return pid
		}
	}
	return 0
}
