package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/envd/interpreter"
	"github.com/moatsh/moat/internal/envd/server"
)

// pythonKernelSpec is where Debian's python3-ipykernel installs its kernelspec;
// when present the default Python context is started eagerly so that the
// first runCode does not wait for a cold kernel.
const pythonKernelSpec = "/usr/share/jupyter/kernels/python3/kernel.json"

// serveInterpreter serves the code-interpreter API (E2B port 49999) on ln
// until stop is called.
// Inside a sandbox kernels run as the template's "user".
func serveInterpreter(ln net.Listener, srv *server.Server, host bool, log *slog.Logger) (stop func()) {
	cfg := interpreter.Config{Env: srv.State().Env, Logger: log.With("component", "interpreter")}
	if !host {
		_, err := os.Stat(pythonKernelSpec)
		cfg.WarmPython = err == nil
		if u, err := user.Lookup("user"); err == nil {
			uid, _ := strconv.ParseUint(u.Uid, 10, 32)
			gid, _ := strconv.ParseUint(u.Gid, 10, 32)
			cfg.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
			cfg.DefaultCwd = u.HomeDir
			cfg.KernelEnv = []string{"HOME=" + u.HomeDir, "USER=user", "LOGNAME=user"}
		}
	}
	svc := interpreter.NewService(cfg)
	hs := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 640 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("code interpreter stopped", "err", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "code interpreter listening on %s\n", ln.Addr())
	return func() {
		_ = hs.Close()
		svc.Close()
	}
}
