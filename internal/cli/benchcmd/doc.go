// Package benchcmd is `moat bench`: create→first command against a bare
// OCI-runtime run, and its other modes (QEMU jail cost, pooled starts,
// density, template builds, a simulated cluster), each printing medians
// and ratios. It runs on the server host (Linux) only; cmd/moat registers
// the flags it shares with other commands.
package benchcmd
