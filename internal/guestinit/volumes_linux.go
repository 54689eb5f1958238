package guestinit

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// MountVolumesCmd is the command (argv[1]) that makes moat-vminit mount
// the sandbox's volumes instead of booting: the vm runtime runs
// "/proc/1/exe mount-volumes /v0=/data ..." as root through envd after a
// restore (the init binary is always there, whatever the template has;
// the template needs no NFS tools: the kernel's client is mounted
// directly).
const MountVolumesCmd = "mount-volumes"

// VolumeServer is the address of the sandbox's volume server: the
// guest's gateway (the tap in the sandbox's namespace), port 2049.
const VolumeServer = "169.254.100.1"

// VolumeMountOptions are the kernel NFS client's options for a volume:
// NFSv3 over TCP to port 2049 for both MOUNT and NFS (no portmapper), no
// NLM (locks stay the guest's own) and no NFSACL; hard, so a server that
// restarts (pause, resume, a crash) delays I/O instead of failing it.
// actimeo=1: attributes are revalidated after a second, so a change by
// another sandbox shows within about a second even in a file held open;
// lookupcache=positive: a name another sandbox creates is found at once
// (no cached "does not exist"). Opening a file always revalidates it
// (close-to-open).
const VolumeMountOptions = "vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,mountvers=3,nolock,noacl,hard," +
	"actimeo=1,lookupcache=positive,addr=" + VolumeServer + ",mountaddr=" + VolumeServer

// MountVolumes mounts each "<export>=<path>" of args (creating path).
func MountVolumes(args []string) error {
	for _, a := range args {
		export, path, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(export, "/") || !strings.HasPrefix(path, "/") {
			return fmt.Errorf("mount-volumes: bad argument %q (want /export=/path)", a)
		}
		if err := os.MkdirAll(path, 0o755); err != nil {
			return fmt.Errorf("mount-volumes: %w", err)
		}
		if err := unix.Mount(VolumeServer+":"+export, path, "nfs", unix.MS_NOSUID|unix.MS_NODEV, VolumeMountOptions); err != nil {
			return fmt.Errorf("mount-volumes: mount %s on %s: %w", export, path, err)
		}
	}
	return nil
}
