// Command moat-vminit is PID 1 inside a Moat microVM (see
// internal/runtime/vm/guestinit). The VM runtime packs it into the guest's
// initramfs; build it statically: CGO_ENABLED=0 go build ./cmd/moat-vminit.
package main

import "github.com/moatsh/moat/internal/runtime/vm/guestinit"

func main() { guestinit.Main() }
