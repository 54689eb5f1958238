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
//	templates/<name>-<stamp>/snap-<hash>/             disk.qcow2 (guest disk at snapshot), mem (guest RAM), state (devices), meta
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
// This package keeps the sandbox bookkeeping (create, kill, pause, resume,
// snapshots, recovery); the parts that need none of it live in
// subpackages: qemu (one QEMU process: command line, jail, log, console,
// QMP), launch (a sandbox's files, network and QEMU up to the snapshot's
// load; starting a guest's QEMU: guest network, jail, cgroup, sockets),
// slots (the IDs of sandboxes made ahead, slots_linux.go), templatesnap (boot files, accelerator probe, template snapshots
// and their warm-up), snapshot (the snapshot layout and meta.json),
// image (guest kernel, initramfs, disk images, qcow2), guestnet (tap, NAT
// and anti-spoofing in the sandbox's namespace), memfile (spares,
// memory-file writeback, syncs), prune (template image GC), guestenvd
// (health polls and one-shot commands to a guest's envd), vmbench (the
// start and jail benchmarks of `moat bench`), volserver (the jailed NFS
// server of a sandbox's volumes, volumes_linux.go) and guestinit
// (moat-vminit, the guest's init).
package vm
