// Package density is `moat bench --density`: issue 12's density test, in this one process. One
// server runs the container and vm runtimes side by side (app.Serve, as
// `moat serve --runtime container,vm`); the benchmark brings up
// Config.containers container sandboxes of the template, then
// Config.vms microVMs of vmMiB, all alive at once, checks that every
// one answers a command (its own create env var echoed back), lets them
// idle and prints the host memory each idle sandbox costs: /proc/meminfo
// deltas, the server's RSS, envd's and QEMU's RSS and PSS, the sandboxes'
// cgroup usage. Then it kills them all and fails if anything of theirs is
// left on the host (the final leak check of scripts/test.sh). A failure
// half-way still kills every sandbox it created. Nothing here asserts a
// size: the numbers are printed.
package density
