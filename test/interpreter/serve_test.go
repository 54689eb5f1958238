package interpreter_test

import (
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/interpreter"
)

// TestServe serves the API on $MOAT_INTERPRETER_LISTEN (e.g.
// 127.0.0.1:49999) for $MOAT_INTERPRETER_SERVE_FOR (default 2m), so the
// real @e2b/code-interpreter SDK can be pointed at it with E2B_DEBUG=true.
// Skipped unless the variable is set.
func TestServe(t *testing.T) {
	addr := os.Getenv("MOAT_INTERPRETER_LISTEN")
	if addr == "" {
		t.Skip("MOAT_INTERPRETER_LISTEN not set")
	}
	requireKernel(t)
	d, err := time.ParseDuration(os.Getenv("MOAT_INTERPRETER_SERVE_FOR"))
	if err != nil {
		d = 2 * time.Minute
	}
	svc := interpreter.NewService(interpreter.Config{
		WarmPython: true,
		DefaultCwd: t.TempDir(),
		Env:        func() map[string]string { return map[string]string{"MOAT_FROM_ENVD": "1"} },
	})
	defer svc.Close()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: svc.Handler()}
	go func() { _ = srv.Serve(l) }()
	time.Sleep(d)
	_ = srv.Close()
}
