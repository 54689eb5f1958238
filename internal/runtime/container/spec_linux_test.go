package container

import (
	"slices"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatsh/moat/internal/runtime"
)

func TestOCISpec(t *testing.T) {
	spec := ociSpec(runtime.Spec{ID: "iabc", TemplateID: "base", VCPUs: 2, MemoryMiB: 256, Pids: 100},
		"/run/netns/moat-iabc", "/moat/iabc")
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
		{"cgroup namespace", func() bool { _, ok := nsPath[specs.CgroupNamespace]; return ok }()},
		{"no user namespace", func() bool { _, ok := nsPath[specs.UserNamespace]; return !ok }()},
		{"cgroups path", spec.Linux.CgroupsPath == "/moat/iabc"},
		{"memory limit", *spec.Linux.Resources.Memory.Limit == 256<<20},
		{"no swap", *spec.Linux.Resources.Memory.Swap == 256<<20},
		{"pids", *spec.Linux.Resources.Pids.Limit == 100},
		{"cpu quota", *spec.Linux.Resources.CPU.Quota == 200000 && *spec.Linux.Resources.CPU.Period == 100000},
		{"deny mount", denied["mount"]},
		{"deny unshare", denied["unshare"]},
		{"deny ptrace", denied["ptrace"]},
		{"deny bpf", denied["bpf"]},
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
