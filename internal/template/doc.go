// Package template builds the root filesystems sandboxes start from.
//
// A template is a Definition (Debian suite, mirror, packages, shell steps)
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
// layers (hard links), so every writer here replaces a file (unlink and
// create, or write a temporary file and rename) and never writes into an
// existing one or changes its owner or mode in place; only directories,
// which hard-link copies do not share, are changed in place.
package template
