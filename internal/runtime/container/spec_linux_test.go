package container

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/runtime"
)

func TestOCISpec(t *testing.T) {
	spec := ociSpec(runtime.Spec{ID: "iabc", TemplateID: "base", VCPUs: 2, MemoryMiB: 256, Pids: 100},
		"/run/netns/moat-iabc", "/moat/iabc", "/data/sandboxes/iabc/sys", idmap.Range{Host: idmap.FirstHost + idmap.Size})
	denied := map[string]bool{}
	for _, s := range spec.Linux.Seccomp.Syscalls {
		if len(s.Args) == 0 && s.Action == specs.ActErrno {
			for _, n := range s.Names {
				denied[n] = true
			}
		}
	}
	nsPath := map[specs.LinuxNamespaceType]string{}
	for _, ns := range spec.Linux.Namespaces {
		nsPath[ns.Type] = ns.Path
	}
	tests := []struct {
		name string
		ok   bool
	}{
		{"envd is the process", slices.Equal(spec.Process.Args, []string{"/usr/local/bin/envd", "--port", "49983"})},
		{"sandbox id in env", slices.Contains(spec.Process.Env, "MOAT_SANDBOX_ID=iabc")},
		{"template id in env", slices.Contains(spec.Process.Env, "MOAT_TEMPLATE_ID=base")},
		{"default hostname", spec.Hostname == "sandbox"},
		{"no terminal", !spec.Process.Terminal},
		{"no_new_privs", spec.Process.NoNewPrivileges},
		{"no CAP_SYS_ADMIN", !slices.Contains(spec.Process.Capabilities.Bounding, "CAP_SYS_ADMIN")},
		{"CAP_NET_BIND_SERVICE", slices.Contains(spec.Process.Capabilities.Effective, "CAP_NET_BIND_SERVICE")},
		{"netns path", nsPath[specs.NetworkNamespace] == "/run/netns/moat-iabc"},
		{"pid namespace", func() bool { _, ok := nsPath[specs.PIDNamespace]; return ok }()},
		{"user namespace", func() bool { p, ok := nsPath[specs.UserNamespace]; return ok && p == "" }()},
		{"uid map", slices.Equal(spec.Linux.UIDMappings, []specs.LinuxIDMapping{{ContainerID: 0, HostID: idmap.FirstHost + idmap.Size, Size: idmap.Size}})},
		{"gid map", slices.Equal(spec.Linux.GIDMappings, spec.Linux.UIDMappings)},
		{"cgroup namespace", func() bool { _, ok := nsPath[specs.CgroupNamespace]; return ok }()},
		{"cgroups path", spec.Linux.CgroupsPath == "/moat/iabc"},
		{"memory limit", *spec.Linux.Resources.Memory.Limit == 256<<20},
		{"no swap", *spec.Linux.Resources.Memory.Swap == 256<<20},
		{"pids", *spec.Linux.Resources.Pids.Limit == 100},
		{"cpu quota", *spec.Linux.Resources.CPU.Quota == 200000 && *spec.Linux.Resources.CPU.Period == 100000},
		{"deny mount", denied["mount"]},
		{"deny unshare", denied["unshare"]},
		{"deny ptrace", denied["ptrace"]},
		{"deny bpf", denied["bpf"]},
		{"deny io_uring", denied["io_uring_setup"] && denied["io_uring_enter"] && denied["io_uring_register"]},
		{"allow clock_settime", !denied["clock_settime"]},
		{"mask /proc/kcore", slices.Contains(spec.Linux.MaskedPaths, "/proc/kcore")},
		{"ro /proc/sys", slices.Contains(spec.Linux.ReadonlyPaths, "/proc/sys")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.ok {
				t.Fail()
			}
		})
	}
}

func TestResourcesUnlimited(t *testing.T) {
	r := resources(runtime.Spec{})
	if r.Memory != nil || r.Pids != nil || r.CPU != nil {
		t.Fatalf("zero spec set limits: %+v", r)
	}
}

func TestTraversable(t *testing.T) {
	base := t.TempDir()
	for _, p := range []string{filepath.Dir(base), base} { // testing makes them 0700
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(p string, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The data dir and its sandboxes dir are made searchable...
	data := mk(filepath.Join(mk(filepath.Join(base, "ok"), 0o755), "data"), 0o700)
	if err := traversable(filepath.Join(data, "sandboxes")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{data, filepath.Join(data, "sandboxes")} {
		if fi, _ := os.Stat(p); fi.Mode().Perm()&0o001 == 0 {
			t.Errorf("%s is %v, want o+x", p, fi.Mode().Perm())
		}
	}
	// ...but a closed ancestor is reported, not changed.
	closed := mk(filepath.Join(base, "closed"), 0o700)
	data = mk(filepath.Join(mk(filepath.Join(closed, "x"), 0o755), "data"), 0o755)
	err := traversable(filepath.Join(data, "sandboxes"))
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), closed+" is not searchable") {
		t.Fatalf("closed ancestor: %v", err)
	}
	if fi, _ := os.Stat(closed); fi.Mode().Perm() != 0o700 {
		t.Errorf("ancestor changed to %v", fi.Mode().Perm())
	}
}

// TestRlimitsReserveThreadsForEnvd: RLIMIT_NPROC sits below the pids
// limit by a reserve, so a fork bomb (not run as root) cannot take the
// threads envd needs to survive it (test/e2e isolation: fork bomb).
func TestRlimitsReserveThreadsForEnvd(t *testing.T) {
	for _, tc := range []struct{ pids, nproc int }{
		{0, -1}, {1024, 896}, {4096, 3584}, {128, 96}, {40, 20}, {1, 1},
	} {
		got := -1
		for _, r := range rlimits(tc.pids) {
			if r.Type == "RLIMIT_NPROC" {
				if r.Soft != r.Hard {
					t.Errorf("pids %d: soft %d != hard %d: a sandbox could raise its own", tc.pids, r.Soft, r.Hard)
				}
				got = int(r.Hard)
			}
		}
		if got != tc.nproc {
			t.Errorf("pids %d: RLIMIT_NPROC %d, want %d", tc.pids, got, tc.nproc)
		}
	}
}
