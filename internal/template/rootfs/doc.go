// Package rootfs makes a directory tree a sandbox root filesystem and
// handles such trees on the host.
//
// Finalize and FinalizeImage install envd, the static files every sandbox
// expects (/etc/hostname, /etc/hosts, /etc/resolv.conf) and, for images,
// the base directories and the sandbox user (Account), without running
// anything in the tree. SwapDirs, RemoveTree, InUseAsLowerdir and LockFile
// move, delete and guard whole trees safely: atomically, past mounts a
// killed build left behind, never under a running sandbox's overlay.
//
// It is its own package because every template builder (package template's
// Debian builds, images, copies of other templates, package build's layers)
// writes trees the same way, and these writers share one rule: trees may
// share their files' inodes with build layers (hard links), so every writer
// here replaces a file (unlink and create, or write a temporary file and
// rename) and never writes into an existing one or changes its owner or
// mode in place; only directories, which hard-link copies do not share,
// are changed in place.
package rootfs
