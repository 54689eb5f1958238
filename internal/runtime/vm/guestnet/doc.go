// Package guestnet sets up a microVM's side of its sandbox's network
// namespace: the tap QEMU attaches the guest's virtio-net to, the NAT that
// maps the sandbox address to the guest (IPv4 and IPv6) and the
// anti-spoofing rules on the tap. Every guest has the same addresses and
// MAC, so that clones of one snapshot need no reconfiguration; they are
// also baked into the guest kernel command line (see package qemu).
// It exists apart from package vm because it is plain netlink/nftables
// work with no knowledge of QEMU or of the runtime's bookkeeping.
package guestnet
