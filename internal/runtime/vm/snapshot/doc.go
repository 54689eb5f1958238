// Package snapshot is the on-disk layout of the vm runtime's snapshots: a
// template build's snapshot (templates/<key>/snap-<hash>/, see TemplateKey)
// or a sandbox saved by Runtime.Snapshot (snapshots/<id>/), their files
// (disk.qcow2, mem, state), the QEMU machine that restores one, and the
// meta.json with which a later process starts QEMU again on a sandbox's or
// snapshot's files.
//
// It exists apart from package vm because the template boot (package
// templatesnap), the sandbox bookkeeping (package vm) and the benchmarks
// (package vmbench) all read and write this layout; it holds no state.
package snapshot
