// Package templatesnap prepares what every guest of the vm runtime starts
// from: the guest kernel and initramfs, the accelerator (KVM when a probe
// guest boots with it, else TCG), and each template build's snapshot,
// taken by booting the template once, running a few warm-up commands
// (warm_linux.go: the first command of a restored guest then finds the
// shell and C library in its page cache), waiting for the code
// interpreter's default Python kernel where the template has one (a
// clone's first runCode then needs no kernel start) and freezing it. It also prunes
// the template images nothing needs any more (with package prune).
//
// It exists apart from package vm because it needs none of the sandbox
// bookkeeping: package vm asks it for a snapshot (Set.Ensure) and
// restores sandboxes from it.
package templatesnap
