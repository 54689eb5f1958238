//go:build !linux

package guestinit

import (
	"fmt"
	"os"
)

// Main exits: the guest init only runs on Linux.
func Main() {
	fmt.Fprintln(os.Stderr, "moat-vminit: linux only")
	os.Exit(1)
}
