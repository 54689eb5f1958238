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
package template
