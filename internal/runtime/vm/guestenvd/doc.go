// Package guestenvd is a guest's envd as the vm runtime's host side
// reaches it: its port, the /health poll that tells a booted or restored
// guest is up, and a process API client for one-shot commands (run with
// package runcmd: the template warm-up, the benchmarks).
//
// It exists apart from package vm because it is an HTTP client of envd
// only: it knows nothing of QEMU, sandboxes or snapshots.
package guestenvd
