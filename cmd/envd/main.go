// Command envd is Moat's in-sandbox agent, wire-compatible with E2B's envd:
// it serves the process and filesystem Connect services and the plain HTTP
// API on port 49983. Inside a container it is the entry process: as PID 1
// it also reaps orphans (package reaper; on kernels without pidfds it
// re-executes itself as a child and reaps as the parent). With --host it runs as
// a plain process (for tests), mapping root and user to the current account.
//
// Its listeners are plain TCP, not Go's default Multipath TCP: its clients
// are Moat's proxy and the sandbox's own processes, and an MPTCP listener
// cost every sandbox's start a probe socket and every accepted connection
// the kernel's fallback from MPTCP.
//
//go:debug multipathtcp=0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/envd/floor"
	"github.com/moatsh/moat/internal/envd/reaper"
	"github.com/moatsh/moat/internal/envd/server"
)

// childEnv marks the re-executed child of a PID-1 envd (kernels without pidfds).
const childEnv = "ENVD_CHILD"

type options struct {
	port    int
	addr    string
	host    bool
	home    string
	code    string
	floor   string
	verbose bool
}

func main() {
	if os.Getpid() == 1 && os.Getenv(childEnv) == "" {
		if !reaper.Supported() {
			os.Exit(runInit()) // old kernel: a second process waits for orphans
		}
		// One process: orphans are reaped beside the server. Its first pass
		// (reading /proc) took ~1 ms of envd's start, before the listener;
		// Start registers for SIGCHLD before that pass, so an orphan
		// reparented meanwhile is reaped all the same.
		go reaper.Start()
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "envd:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("envd", flag.ContinueOnError)
	fs.IntVar(&o.port, "port", server.DefaultPort, "port to listen on (all interfaces)")
	fs.StringVar(&o.addr, "addr", "", "address to listen on, overriding --port (e.g. 127.0.0.1:0)")
	fs.BoolVar(&o.host, "host", false, "host mode: run outside a sandbox; root and user are the current account")
	fs.StringVar(&o.home, "home", "", "home directory of root and user in host mode (default: a new temporary directory)")
	fs.StringVar(&o.code, "code-addr", "", `address of the code-interpreter API (default ":49999" in a sandbox, off with --host; "off" disables)`)
	fs.BoolVar(&o.verbose, "verbose", false, "log debug messages")
	fs.StringVar(&o.floor, "floor", "", "benchmarks: serve only a bare file server on this address instead (package floor; moat bench --files)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.code == "" && !o.host {
		o.code = ":49999"
	}
	if o.code == "off" {
		o.code = ""
	}
	return o, nil
}

func run() error {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		return err
	}
	if o.floor != "" {
		return serveFloor(o.floor)
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if o.host && o.home == "" {
		if o.home, err = os.MkdirTemp("", "envd-home-"); err != nil {
			return fmt.Errorf("create home directory: %w", err)
		}
	}
	addr := o.addr
	if addr == "" {
		addr = net.JoinHostPort("", strconv.Itoa(o.port))
	}
	// Listening first: connections wait in the backlog while the servers
	// are built (~1 ms), and the runtime, which dials envd until one is
	// accepted, sees it ready that much sooner. The code interpreter's
	// port listens before envd's, so a ready envd means both accept.
	var codeLn net.Listener
	if o.code != "" {
		if codeLn, err = net.Listen("tcp", o.code); err != nil {
			return fmt.Errorf("listen on %s: %w", o.code, err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	fmt.Fprintf(os.Stderr, "envd listening on %s\n", ln.Addr()) // the runtime watches for this write
	srv, err := server.New(server.Config{
		Addr: addr, HostMode: o.host, Home: o.home, Logger: log, Internal: internalEnv(),
	})
	if err != nil {
		ln.Close()
		return err
	}
	defer srv.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if codeLn != nil {
		defer serveInterpreter(codeLn, srv, o.host, log)()
	}
	log.Debug("envd started", "host", o.host, "home", o.home)
	if err := srv.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("envd stopped")
	return nil
}

// serveFloor serves package floor's bare file server on addr, with the
// protocols envd's own server speaks (HTTP/1.1 and h2c), until it fails.
func serveFloor(addr string) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Addr: addr, Handler: floor.Handler("/"), Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// internalEnv returns the E2B_* variables every sandbox process sees.
func internalEnv() map[string]string {
	env := map[string]string{"E2B_SANDBOX": "true"}
	if v := os.Getenv("MOAT_SANDBOX_ID"); v != "" {
		env["E2B_SANDBOX_ID"] = v
	}
	if v := os.Getenv("MOAT_TEMPLATE_ID"); v != "" {
		env["E2B_TEMPLATE_ID"] = v
	}
	return env
}
