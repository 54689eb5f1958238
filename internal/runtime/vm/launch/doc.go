// Package launch starts the QEMU of a sandbox or template boot: it sets up
// the guest network (package guestnet) in the sandbox's network namespace,
// hands the QEMU's directory to the unprivileged host IDs it runs as,
// starts it jailed (qemu.JailConfig, internal/jail) in its cgroup, and
// connects to its console and QMP sockets. Launcher.Sandbox does all of a
// sandbox's restore up to the snapshot's load: its directory (a spare's or
// copied files of the snapshot, meta.json), its network, its host IDs and
// its QEMU waiting with -incoming defer.
//
// It exists apart from package vm because a sandbox's create and resume,
// a template's first boot (package templatesnap) and the benchmarks
// (package vmbench) all start QEMU this way; it keeps no bookkeeping of
// its own.
package launch
