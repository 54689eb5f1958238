// Package guestinit is PID 1 of a Moat microVM: it runs from the initramfs,
// loads the kernel modules the initramfs carries, switches to the root disk,
// configures the guest's fixed network addresses (IPv4, and IPv6 when the
// command line names one) and keeps envd running while it reaps orphaned
// processes. After a restore from a snapshot it renews the guest's CRNG
// and clock and warms the first command's path (warmUp). cmd/moat-vminit
// is its static binary. It sits outside internal/runtime/vm because it is
// the guest's program, not the host backend's: the backend shares only its
// kernel command line keys and paths with it.
package guestinit

// Kernel command line keys read by Main.
const (
	ArgRoot     = "moat.root"     // root block device, default /dev/vda
	ArgAddr     = "moat.addr"     // eth0 address with prefix, default 169.254.100.2/30
	ArgGateway  = "moat.gw"       // default gateway, default 169.254.100.1
	ArgAddr6    = "moat.addr6"    // eth0 IPv6 address with prefix; none: no IPv6
	ArgGateway6 = "moat.gw6"      // IPv6 default gateway
	ArgHostname = "moat.hostname" // default "sandbox"
	ArgEnvd     = "moat.envd"     // envd path inside the root, default /usr/local/bin/envd
	ArgProbe    = "moat.probe"    // "1": print ProbeMarker and power off (accelerator probe)
	ArgWarmup   = "moat.warmup"   // "0": no warm-up command after a restore (see warmUp)
)

// ProbeMarker is printed on the console in probe mode.
const ProbeMarker = "moat-vminit: probe ok"

// ModulesOrder is the initramfs file listing module paths to load, one a line.
const ModulesOrder = "/modules.order"
