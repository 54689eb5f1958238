// Package container is the "container" runtime backend: each sandbox is an
// OCI container (crun or runc) on an overlayfs copy-on-write view of the
// template root filesystem, in its own network namespace from netpolicy, with
// cgroup limits, a user namespace mapping its IDs to a host range of its own
// (package idmap), a Docker-like capability set, no_new_privs and a seccomp
// denylist. It shares the host kernel: the fastest and weakest isolation level.
//
// Host objects per sandbox, all named after its ID:
//
//	<DataDir>/sandboxes/<id>/{disk/{upper,work},lower,rootfs,sys,log/envd.log,disk.img,idmap,config.json,pid}
//	ext4 of disk.img on …/disk (a loop device that detaches on unmount; only
//	with a disk quota), idmapped template mount on …/lower, overlay mount on
//	…/rootfs, sysfs of the sandbox's netns on …/sys, a 1 MiB tmpfs on …/log
//	holding envd's stdout/stderr (capped; charged to the sandbox's memory)
//	container "moat-<id>" in the OCI state root (default /run/moat/<runc|crun>)
//	cgroups /sys/fs/cgroup/<controller>/moat/<id>
//	netns, veth and nftables set member (see netpolicy)
//
// Pause and Resume use the cgroup freezer: CRIU cannot checkpoint on the
// kernels we run, so a paused container keeps its memory.
//
// This package is the sandbox lifecycle (Create, Kill, Recover...) and the
// bundle's config.json; package oci drives the OCI runtime binary and
// package hostfs mounts and removes the sandbox dir's filesystems.
package container
