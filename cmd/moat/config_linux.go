package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/template"
)

// backendFlags are the runtime backends' settings of the server-side
// commands: each a flag whose default is its MOAT_* variable. This and the
// other flag registrations in cmd/moat are the only places that read MOAT_*
// variables; the packages below get typed configuration
// (app.Backends, app.Config).
type backendFlags struct {
	oci, runsc, gvisorPlatform, gvisorNetwork, gvisorFlags string
	vmAccel, vmInit, vmNFSD                                string
	vmPrelaunch, vmKeepPaused, containerPrelaunch, scope   int
}

func (b *backendFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&b.oci, "oci-runtime", envOr("", "MOAT_OCI_RUNTIME"),
		"OCI runtime of container sandboxes and microVM template builds: runc|crun (env MOAT_OCI_RUNTIME; default: crun if it works, else runc)")
	f.StringVar(&b.runsc, "runsc", envOr("", "MOAT_RUNSC"), "gvisor runtime: the runsc binary (env MOAT_RUNSC; default: runsc on PATH)")
	f.StringVar(&b.gvisorPlatform, "gvisor-platform", envOr("", "MOAT_GVISOR_PLATFORM"),
		"gvisor runtime: runsc --platform (env MOAT_GVISOR_PLATFORM; default: runsc's, systrap)")
	f.StringVar(&b.gvisorNetwork, "gvisor-network", envOr("", "MOAT_GVISOR_NETWORK"),
		"gvisor runtime: runsc --network, sandbox|host (env MOAT_GVISOR_NETWORK; default: sandbox)")
	f.StringVar(&b.gvisorFlags, "gvisor-flags", envOr("", "MOAT_GVISOR_FLAGS"),
		"gvisor runtime: more runsc flags, space-separated (env MOAT_GVISOR_FLAGS)")
	f.StringVar(&b.vmAccel, "vm-accel", envOr("", "MOAT_VM_ACCEL"), "vm runtime accelerator: auto|kvm|tcg (env MOAT_VM_ACCEL; default auto)")
	f.StringVar(&b.vmInit, "vminit", envOr("", "MOAT_VMINIT"),
		"vm runtime: the moat-vminit binary (env MOAT_VMINIT; default: next to the moat binary, else on PATH)")
	f.IntVar(&b.vmPrelaunch, "vm-prelaunch", 1,
		"vm runtime: QEMUs launched ahead, waiting for the snapshot, per template and size that was created before; 0 turns them off")
	f.IntVar(&b.containerPrelaunch, "container-prelaunch", 1,
		"container runtime: containers created ahead (not started) per template and size that was created before; 0 turns them off")
	f.IntVar(&b.vmKeepPaused, "vm-keep-paused", 4,
		"vm runtime: paused sandboxes (without volumes) whose QEMU stays, stopped, for 5 minutes, so that their resume only continues it; 0 turns it off")
	f.IntVar(&b.scope, "scope", 0,
		"tests: a server beside the host's own, 1-9, whose host objects (cgroups, OCI state, network names and addresses, ID ranges, host lock) are named apart; 0 is the host scope")
	f.StringVar(&b.vmNFSD, "nfsd", envOr("", "MOAT_NFSD"),
		"vm runtime: the moat-nfsd binary that serves volumes to microVMs (env MOAT_NFSD; default: next to the moat binary, else on PATH)")
}

func (b *backendFlags) backends() app.Backends {
	return app.Backends{
		Container: app.ContainerSettings{OCIRuntime: b.oci, Prelaunch: orNone(b.containerPrelaunch)},
		GVisor:    app.GVisorSettings{Runsc: b.runsc, Platform: b.gvisorPlatform, Network: b.gvisorNetwork, Flags: strings.Fields(b.gvisorFlags)},
		VM: app.VMSettings{Accel: b.vmAccel, Init: b.vmInit, NFSD: b.vmNFSD, Prelaunch: orNone(b.vmPrelaunch),
			KeepPaused: orNone(b.vmKeepPaused)},
		Host: runtime.Host{Scope: b.scope},
	}
}

// addEnvdFlag registers --envd (env MOAT_ENVD): the envd binary installed
// into templates.
func addEnvdFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "envd", envOr("", template.EnvdEnv),
		"envd binary to install into templates (env "+template.EnvdEnv+"; default: envd next to the moat binary)")
}

// orNone maps a count flag whose 0 means none (--vm-prelaunch,
// --vm-keep-paused, --container-prelaunch) to the backends' settings, where 0 means the default.
func orNone(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
