// Package idmap gives every container sandbox a range of host user and group
// IDs of its own, so that root inside a sandbox is an otherwise unused,
// unprivileged ID outside it, different from every other sandbox's.
//
// Two pieces do it: the user namespace mapping written into the OCI spec,
// and an idmapped bind mount of the template root filesystem (files owned by
// N in the template appear owned by Host+N through it), so the template is
// shared by all sandboxes without a per-sandbox copy or chown.
package idmap
