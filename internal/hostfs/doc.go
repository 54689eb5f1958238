// Package hostfs makes and removes the host filesystems of a container or
// gvisor sandbox's directory <dir>: the idmapped view of the template on
// <dir>/lower and the overlay root on <dir>/rootfs, the sandbox's own ext4
// disk (a sparse image on a self-detaching loop device) on <dir>/disk, the
// capped tmpfs for envd's log on <dir>/log and the netns's sysfs on
// <dir>/sys, the sandbox's /etc/hosts, hostname and resolv.conf in the
// overlay's upper dir; and it removes <dir> only once nothing is mounted in it. It
// exists apart from package container so that the mount plumbing, which
// only knows paths, sizes and ID ranges, stays out of the sandbox
// lifecycle; every object it makes lives under <dir>, named after the
// sandbox's ID by the caller. It sits outside internal/runtime because
// template builds and volumes use the same plumbing (loop-mounted images,
// removal that refuses while something is mounted) without depending on a
// backend.
package hostfs
