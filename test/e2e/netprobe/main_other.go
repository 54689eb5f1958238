//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "netprobe runs inside Linux sandboxes only")
	os.Exit(2)
}
