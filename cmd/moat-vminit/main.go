// Command moat-vminit is PID 1 inside a Moat microVM (see
// internal/guestinit). The VM runtime packs it into the guest's
// initramfs; build it statically: CGO_ENABLED=0 go build ./cmd/moat-vminit.
package main

import "github.com/moatsh/moat/internal/guestinit"

func main() { guestinit.Main() }
