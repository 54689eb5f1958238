// Package vm is the microVM backend of the Runtime interface: every sandbox
// is a QEMU microvm with its own Linux kernel, restored from a snapshot of
// its template taken right after envd first answered and ran a few warm-up
// commands (see package templatesnap: the first command of a restored
// guest then finds the shell and C library in its page cache), or from a
// snapshot of another sandbox, see Runtime.Snapshot. A sandbox's RAM is its own sparse copy of
// the snapshot's memory file, mapped shared, so that Pause only has to save
// the device state next to it, sync the pages the guest dirtied and end
// QEMU. The copy and the disk overlay are made ahead of creates and written
// back to disk ("spares", package memfile), so a create only renames them and
// a sandbox's first pause writes only what its guest changed.
//
// Files under <DataDir>/vm:
//
//	kernel/<version>-<hash>/{vmlinuz,initramfs.cpio}  guest kernel + initramfs (moat-vminit, virtio modules)
//	templates/<name>-<stamp>/rootfs-v2.ext4           read-only base disk built from the template rootfs (its files + 128 MiB)
//	templates/<name>-<stamp>/snap-<hash>/             disk.qcow2 (guest disk at snapshot), mem (guest RAM), state (devices), meta, ready (once complete)
//	sandboxes/<id>/                                   mem (guest RAM), disk.qcow2 (overlay of the template's disk), meta.json,
//	                                                  idmap (its QEMU's host IDs), state (only while paused), qmp.sock,
//	                                                  console.sock (serial port), console.log{,.1} (its capped mirror),
//	                                                  log/qemu.log (QEMU's output, on a 1 MiB tmpfs), pid;
//	                                                  with volumes: volumes.json, nfsd.pid, log/nfsd.log (package volserver)
//	sandboxes/tpl<hash>/                              idmap only, while a template boots (its QEMU's host IDs)
//	snapshots/<id>/                                   mem, state, disk.qcow2, meta.json of Runtime.Snapshot
//	spares/<instance>/<n>/                            mem, disk.qcow2 made ahead for a template snapshot's next create
//
// Every QEMU runs jailed (package launch, qemu.JailConfig, internal/jail): as an unprivileged
// host user and group of its own (the root of the sandbox's idmap range),
// without capabilities and with no_new_privs, in a mount namespace that
// shows /usr, a minimal /dev, the kernel and initramfs, its disk's backing
// files (read-only) and its own directory, in the sandbox's network
// namespace and cgroup. Its serial port is a socket Moat reads into a
// bounded ring (qemu.Console).
//
// A sandbox's disk is grown online to its Spec.DiskMiB after the restore
// (QMP block_resize; moat-vminit grows the mounted ext4, see
// image/disk_linux.go); it never shrinks below its snapshot's.
//
// A snapshot fixes the guest's memory size and vCPU count, so snapshots are
// cached per (template build, memory, vCPUs, kernel, accelerator). Every
// guest has the same address (169.254.100.2 behind tap0 inside the sandbox's
// network namespace); the namespace DNATs the sandbox address to it, so the
// host reaches envd at Handle.Addr:49983 as with containers and clones need
// no network reconfiguration. The namespace drops what the guest sends
// from any other source address (netdev table moatvmguard on tap0).
//
// This package keeps the sandbox bookkeeping: create, kill, pause and
// resume (lifecycle_linux.go, pause_linux.go), snapshots and forks
// (fork_linux.go), recovery after a restart (recover_linux.go), egress and
// template prunes for the orchestrator (hostops_linux.go), volumes
// (volumes_linux.go), the container runtime template builds run on
// (build_linux.go, runtime.BuildRuntimer), and two ways of making starts
// faster:
//
//   - slots (slots_linux.go; moat serve --vm-prelaunch, DefaultPrelaunch):
//     after a create, a sandbox of the same template build and size is
//     launched ahead up to its QEMU waiting for the snapshot (-incoming
//     defer); the orchestrator's next create takes it through
//     runtime.Prelauncher. Package internal/runtime/slots holds the slots'
//     IDs, for this runtime and the container runtime;
//   - kept QEMUs (kept_linux.go; moat serve --vm-keep-paused,
//     DefaultKeepPaused): a paused sandbox without volumes keeps its
//     stopped QEMU for a while, so that its resume only continues it.
//     Package kept decides how many and for how long.
//
// The parts that need none of the bookkeeping live in subpackages:
//
//	qemu         one QEMU process: command line, jail config, start and adopt, log, console, QMP
//	launch       starting a guest's QEMU (guest network, host IDs, jail, cgroup, sockets), and a
//	             sandbox's whole restore up to the snapshot's load
//	freeze       the pause file protocol shared by Pause, Snapshot and Fork: stop, save, sync, commit
//	             by rename; continue with the guest's CRNG and clock renewed
//	kept         which paused sandboxes keep their QEMU, and until when (IDs and timers only)
//	templatesnap boot files, the accelerator probe, each template build's snapshot and its warm-up,
//	             and the prune of template images
//	snapshot     the on-disk layout of template and Runtime.Snapshot snapshots, meta.json
//	prune        removal of template images and snapshots nothing's backing chain uses
//	image        guest kernel, initramfs (cpio), template disk images, qcow2 overlays
//	memfile      spares, the memory files' background writeback, sync helpers
//	guestnet     tap, NAT and anti-spoofing in the sandbox's network namespace
//	guestenvd    a guest's envd from the host: /health polls, one-shot commands
//	guestinit    moat-vminit, the guest's PID 1 (cmd/moat-vminit)
//	volserver    the jailed NFS server (moat-nfsd) of a sandbox's volumes
//	vmbench      the start and jail benchmarks of `moat bench`
package vm
