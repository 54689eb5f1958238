// Command moat is Moat's single host binary: the server (`moat serve`), the
// template builder (`moat template build`) and the client CLI (`moat
// sandbox ...`, `moat run`). It only parses flags and wires packages
// together; the work happens in internal/app, internal/template and the
// public Go SDK (sdk/go). The server-side commands (serve, apikey, bench,
// building and listing the data directory's templates) are in *_linux.go
// files; on other systems (macOS) moat is the client of a remote server.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/moatsh/moat/internal/cloexec"
)

func main() {
	// Before anything starts a child: descriptors inherited from the
	// operator's shell must not reach the OCI runtime, envd or QEMU.
	if err := cloexec.MarkInherited(); err != nil {
		fmt.Fprintf(os.Stderr, "moat: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
