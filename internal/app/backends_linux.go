package app

// The runtime backends `moat serve` can run, registered by name with
// package runtime. The wiring owns them: no other package outside
// internal/runtime imports a backend to serve sandboxes.
import (
	_ "github.com/moatsh/moat/internal/runtime/container" // registers runtime "container"
	_ "github.com/moatsh/moat/internal/runtime/gvisor"    // registers runtime "gvisor"
	_ "github.com/moatsh/moat/internal/runtime/vm"        // registers runtime "vm"
)
