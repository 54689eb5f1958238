// Package nfsd is Moat's NFSv3 server: it serves directory trees (one per
// volume a microVM sandbox mounts, package export) over NFS version 3
// (RFC 1813) and its MOUNT protocol on one TCP port, to that sandbox's
// guest kernel, which mounts them with its own NFS client.
//
// Why NFS: a microVM sandbox is a migrate-from-file restore of a template
// snapshot and is paused by a migrate-to-file, and the QEMU it runs on
// (7.2, Debian 12) cannot migrate a guest with a vhost-user-fs (virtiofs)
// device, while 9p is unmigratable while mounted and absent from the guest
// kernel. NFS needs no device at all: the guest reaches the server over
// its own network interface (the tap in its sandbox's network namespace),
// so snapshots, pauses and resumes are untouched, and after a resume the
// guest's client simply reconnects.
//
// Why Moat's own: the Go NFS server we looked at (github.com/willscott/go-nfs,
// on a billy filesystem) serves calls as the server's own user through
// paths it joins, and its handle cache lives in memory (a restart makes
// every handle stale, which a paused guest sees as lost files); intermediate
// symlinks are then resolved by the host.
// A volume shared by untrusted guests needs the opposite on each point:
// per-call credentials applied by the host kernel (setfsuid on a locked
// thread), the kernel's own handles, stable across restarts, and openat2
// containment that never follows a link (package export); the protocol
// part is small next to those, and its decoder is fuzzed (FuzzCall, also
// for a minute in the full test tier).
//
// What it serves is what a Linux client with "vers=3,nolock,noacl" and
// explicit ports uses: MOUNT MNT/UMNT/EXPORT and every NFSv3 procedure.
// No portmapper, NLM (locks are the guest's own, nolock), NFSACL or
// RPCSEC_GSS. Calls carry AUTH_UNIX identities; package export runs each
// operation as that identity. Hostile input is bounded: records are at
// most one 1 MiB WRITE plus headers, at most MaxConns connections and
// MaxCalls calls are served at once, connections from unprivileged
// source ports are refused, and malformed calls are answered (or the
// connection closed) without allocating what their lengths claim.
package nfsd
