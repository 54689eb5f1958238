// Command moat is Moat's single host binary: the server (`moat serve`), the
// template builder (`moat template build`) and the client CLI (`moat
// sandbox ...`, `moat run`). It only parses flags and wires packages
// together; the work happens in internal/app, internal/template and the
// public Go SDK (sdk/go).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
