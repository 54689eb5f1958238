// Package oci drives an OCI runtime binary (crun, runc or runsc) for the
// container and gvisor backends: it picks the binary (crun when it works,
// else runc; runsc for gVisor), builds its command lines under Moat's own
// state root, and runs them, on hosts with hybrid cgroups from a private
// mount namespace without the cgroup2 mount (crun refuses those hosts
// otherwise). It exists apart from package container so that the sandbox
// lifecycle (overlay, network, bundle) and the talk with the binary stay
// separate: nothing here knows what a sandbox is, only container names,
// bundles and state roots.
package oci
