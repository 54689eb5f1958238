package interpreter

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/moatsh/moat/internal/jupyter"
)

// kernelRunner runs cells on a Jupyter kernel.
type kernelRunner struct {
	k    *jupyter.Kernel
	lang language
	log  *slog.Logger
}

var _ runner = (*kernelRunner)(nil)

// startKernel launches the language's kernel in cwd and runs its startup
// code.
func startKernel(ctx context.Context, cfg Config, lang language, cwd string) (*kernelRunner, error) {
	spec, err := lang.spec(cfg)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(cwd); err == nil && st.IsDir() {
		spec.Dir = cwd
	} else {
		cfg.Logger.Warn("context cwd unusable, using default", "cwd", cwd, "err", err)
	}
	spec.ExtraEnv = append(spec.ExtraEnv, cfg.KernelEnv...)
	spec.Credential = cfg.Credential
	k, err := jupyter.Start(ctx, spec, jupyter.Options{Logger: cfg.Logger, ConnDir: cfg.ConnDir})
	if err != nil {
		return nil, fmt.Errorf("start %s kernel: %w", lang.name, err)
	}
	r := &kernelRunner{k: k, lang: lang, log: cfg.Logger}
	if err := r.startup(ctx); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *kernelRunner) startup(ctx context.Context) error {
	if r.lang.startup == "" {
		return nil
	}
	reply, err := r.k.ExecuteRequest(ctx, jupyter.ExecuteRequest{Code: r.lang.startup, Silent: true}, nil)
	if err != nil {
		return fmt.Errorf("run %s startup code: %w", r.lang.name, err)
	}
	if reply.Status == "error" {
		r.log.Warn("kernel startup code failed", "lang", r.lang.name, "ename", reply.EName, "evalue", reply.EValue)
	}
	return nil
}

func (r *kernelRunner) run(ctx context.Context, code string, emit func(line)) error {
	t := &translator{emit: emit}
	reply, err := r.k.Execute(ctx, code, t.handle)
	switch {
	case err != nil:
	case reply.Status == "error":
		t.error(reply.EName, reply.EValue, "")
	case reply.Status == "aborted":
		t.error("ExecutionAborted", "Execution was aborted by the kernel", "")
	}
	return err
}

func (r *kernelRunner) runSilent(ctx context.Context, code string) error {
	reply, err := r.k.ExecuteRequest(ctx, jupyter.ExecuteRequest{Code: code, Silent: true}, nil)
	if err != nil {
		return err
	}
	if reply.Status == "error" {
		return fmt.Errorf("silent execution failed: %s: %s", reply.EName, reply.EValue)
	}
	return nil
}

func (r *kernelRunner) restart(ctx context.Context) error {
	if err := r.k.Restart(ctx); err != nil {
		return err
	}
	return r.startup(ctx)
}

func (r *kernelRunner) dead() bool {
	select {
	case <-r.k.Dead():
		return true
	default:
		return false
	}
}

func (r *kernelRunner) close() { _ = r.k.Shutdown(context.Background()) }
