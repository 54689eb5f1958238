// Package moat is the Go client for Moat, the self-hosted, E2B-compatible
// sandbox platform. It exists so Go programs (and the moat CLI) can create
// sandboxes and run commands in them without speaking the REST API and the
// envd Connect protocol by hand.
//
//	c := moat.NewClient() // MOAT_API_URL / E2B_API_URL, MOAT_API_KEY / E2B_API_KEY
//	sb, err := c.CreateSandbox(ctx, moat.CreateOptions{Template: "base"})
//	if err != nil { ... }
//	defer sb.Kill(context.WithoutCancel(ctx))
//	code, err := sb.Run(ctx, "echo hello", moat.RunOptions{Stdout: os.Stdout})
//
// Sandboxes can be paused and resumed (Pause, Connect; CreateOptions.AutoPause
// pauses instead of killing at the timeout) and snapshotted (CreateSnapshot);
// a snapshot's ID or name works as CreateOptions.Template. Events and the
// webhook calls read the team's lifecycle events. Errors wrap the kinds in
// errors.go (ErrNotFound, ErrConflict, ErrNotImplemented, ...).
//
// Of Moat's internal packages the package imports only the error kinds
// (internal/errdefs) and their maps to HTTP statuses and Connect codes
// (errhttp, errconnect), so that client and server share one error map;
// besides those, the generated contracts under api/.
package moat
