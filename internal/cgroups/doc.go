// Package cgroups creates, fills, reads and removes the cgroups the runtime
// backends put sandboxes in. Both the container and the microVM backend need
// the same operations on the same host layout — cgroup v1 hierarchies on a
// hybrid host, the unified v2 tree on a v2-only host — so they live here once.
// Paths are relative to a hierarchy's root, e.g. "/moat/<id>".
package cgroups
