// Package template builds the root filesystems sandboxes start from.
//
// A template is a catalog.Definition (Debian suite, mirror, packages, shell steps)
// turned into a directory tree by mmdebstrap, so no Docker engine or registry
// is needed. The builder installs envd, writes the files every sandbox
// expects (/etc/hostname, /etc/hosts, /etc/resolv.conf) and swaps the result
// into <DataDir>/templates/<name>/rootfs atomically. A stamp file keyed by a
// hash of the definition lets an unchanged rebuild skip mmdebstrap and only
// refresh envd, so it takes seconds; downloaded .deb files are shared between
// builds under <DataDir>/cache/apt.
//
// Package build makes templates from other templates and OCI images
// through CopyRootfs, PullImage and UnpackImage, and swaps the finished
// tree in with Install. Such trees share their files' inodes with build
// layers (hard links); see package rootfs for the rule every writer of a
// tree follows.
//
// Subpackages: rootfs writes and handles the trees, catalog holds the
// Definitions (the built-in templates), progress prints a build's progress
// and runs its logged commands.
package template
