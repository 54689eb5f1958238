// Package qemu runs and talks to one QEMU microvm process: its command
// line (Machine), starting it (jailed, see JailConfig) or adopting it after
// a restart (Proc), its output log on a small tmpfs, its serial console
// read into a bounded ring (Console), and the QMP commands the runtime
// uses (migration to and from a state file, link, disk resize). Its unix
// sockets are only ever reached through an O_PATH descriptor of the socket
// itself, since a jailed QEMU can plant symlinks in its directory.
//
// It exists apart from package vm because none of this knows about
// sandboxes, templates or snapshots: package vm decides which files a
// QEMU gets and what to do with it, this package does it.
package qemu
