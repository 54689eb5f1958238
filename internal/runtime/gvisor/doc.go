// Package gvisor is the "gvisor" runtime backend: the container backend
// (package container: overlay root filesystem, disk quota, netns and
// nftables policy from netpolicy, cgroup limits) with runsc, gVisor's OCI
// runtime, in place of crun/runc. The sandbox's processes run on gVisor's
// user-space kernel (the Sentry) instead of the host's: system calls, /proc,
// /sys and the network stack are gVisor's. Stronger than a container,
// lighter than a microVM.
//
// Host objects per sandbox are the container backend's, under
// <DataDir>/gvisor/sandboxes/<id> and the OCI root /run/moat/runsc.
// docs/threat-model.md says what differs from containers.
package gvisor

// Name is the backend's registered name.
const Name = "gvisor"
