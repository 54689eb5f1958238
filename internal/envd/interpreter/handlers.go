package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/jupyter"
)

// Handler returns the HTTP API. No token is checked: the SDK never sends
// one on /contexts* (reference H5); envd's /envs access is in-process.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, "OK") })
	mux.HandleFunc("POST /execute", s.handleExecute)
	mux.HandleFunc("POST /contexts", s.handleCreateContext)
	mux.HandleFunc("GET /contexts", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.list()) })
	mux.HandleFunc("DELETE /contexts/{id}", s.handleRemoveContext)
	mux.HandleFunc("POST /contexts/{id}/restart", s.handleRestartContext)
	return collapseSlashes(mux)
}

// collapseSlashes rewrites "//execute" (an SDK base URL with a trailing
// slash) to "/execute" instead of letting ServeMux redirect a POST.
func collapseSlashes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "//") {
			p := r.URL.Path
			for strings.Contains(p, "//") {
				p = strings.ReplaceAll(p, "//", "/")
			}
			r.URL.Path, r.URL.RawPath = p, ""
		}
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

// executeRequest is the /execute body; pointers distinguish null/absent.
type executeRequest struct {
	Code      *string           `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func decodeBody(r *http.Request, v any, allowEmpty bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	if allowEmpty && len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

// resolve picks the context for an execute request, or an HTTP status
// and message.
func (s *Service) resolve(ctx context.Context, req executeRequest) (*execContext, int, string) {
	id, lang := str(req.ContextID), str(req.Language)
	switch {
	case id != "" && lang != "":
		return nil, http.StatusBadRequest, "Only one of context_id or language can be provided"
	case id != "":
		c := s.lookup(id)
		if c == nil {
			return nil, http.StatusNotFound, fmt.Sprintf("Context %s not found", id)
		}
		return c, 0, ""
	}
	c, err := s.defaultContext(ctx, lang)
	if errors.Is(err, errUnsupported) {
		return nil, http.StatusBadRequest, fmt.Sprintf("Unsupported language: %s", lang)
	}
	if err != nil {
		s.log.Error("create default context", "lang", lang, "err", err)
		return nil, http.StatusInternalServerError, fmt.Sprintf("Failed to create %s context: %v", publicLanguage(lang), err)
	}
	return c, 0, ""
}

func (s *Service) handleExecute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if err := decodeBody(r, &req, false); err != nil {
		writeText(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Code == nil {
		writeText(w, http.StatusBadRequest, `missing required field "code"`)
		return
	}
	for k := range req.EnvVars {
		if !validEnvKey(k) {
			writeText(w, http.StatusBadRequest, fmt.Sprintf("invalid environment variable name %q", k))
			return
		}
	}
	c, status, msg := s.resolve(r.Context(), req)
	if c == nil {
		writeText(w, status, msg)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := newStreamWriter(w)
	defer sw.finish()
	if err := c.acquire(r.Context()); err != nil {
		return
	}
	defer c.release()
	s.execute(r.Context(), c, *req.Code, req.EnvVars, firstErrorOnly(sw.emit))
}

// firstErrorOnly drops error lines after the first.
func firstErrorOnly(emit func(line)) func(line) {
	sent := false
	return func(l line) {
		if l.Type == "error" {
			if sent {
				return
			}
			sent = true
		}
		emit(l)
	}
}

func synthetic(name, value string) line {
	return line{Type: "error", Fields: map[string]any{"name": name, "value": value, "traceback": ""}}
}

// execute runs code in c with env handling; the caller holds c's lock.
func (s *Service) execute(ctx context.Context, c *execContext, code string, envVars map[string]string, emit func(line)) {
	start := time.Now()
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StartTimeout)
	defer cancel()
	r, err := c.ensure(startCtx)
	if err != nil {
		emit(synthetic("KernelStartError", err.Error()))
		return
	}
	gen := c.restarts.Load()
	s.loadEnv(ctx, c, r)
	if len(envVars) > 0 {
		if err := r.runSilent(ctx, c.lang.setEnv(envVars)); err != nil {
			s.log.Warn("set request env vars", "ctx", c.ID, "err", err)
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.runSilent(rctx, c.lang.restoreEnv(sortedKeys(envVars))); err != nil {
				s.log.Warn("restore env vars", "ctx", c.ID, "err", err)
			}
		}()
	}
	err = r.run(ctx, code, emit)
	s.log.Debug("execution finished", "ctx", c.ID, "took", time.Since(start), "err", err)
	switch {
	case err == nil:
	case errors.Is(err, jupyter.ErrKernelDied) && c.restarts.Load() != gen:
		emit(synthetic("ContextRestarting", "Context was restarted"))
	case errors.Is(err, jupyter.ErrKernelDied):
		emit(synthetic("KernelDied", "The kernel died unexpectedly ("+err.Error()+"); it will be restarted on the next execution"))
	case errors.Is(err, jupyter.ErrInterruptTimeout):
		s.log.Warn("kernel ignored interrupt, restarting", "ctx", c.ID)
		rctx, cancel := context.WithTimeout(context.Background(), s.cfg.StartTimeout)
		defer cancel()
		if err := c.restart(rctx); err != nil {
			s.log.Error("restart stuck kernel", "ctx", c.ID, "err", err)
		}
	case ctx.Err() != nil:
		s.log.Info("execution interrupted: client gone", "ctx", c.ID)
	default:
		emit(synthetic("ExecutionError", err.Error()))
	}
}

// loadEnv runs the language's firstRun code and sets envd's env vars in a
// context before its first execution (after a kernel restart too), in one
// silent execution.
func (s *Service) loadEnv(ctx context.Context, c *execContext, r runner) {
	c.mu.Lock()
	loaded := c.envLoaded
	c.envLoaded = true
	c.mu.Unlock()
	if loaded {
		return
	}
	code := c.lang.firstRun
	env := map[string]string{}
	if s.cfg.Env != nil {
		for k, v := range s.cfg.Env() {
			if validEnvKey(k) {
				env[k] = v
			}
		}
	}
	if len(env) > 0 {
		code = strings.TrimPrefix(code+"\n"+c.lang.setEnv(env), "\n")
	}
	if code == "" {
		return
	}
	if err := r.runSilent(ctx, code); err != nil {
		s.log.Warn("set envd env vars", "ctx", c.ID, "err", err)
	}
}

type createContextRequest struct {
	Language *string `json:"language"`
	Cwd      *string `json:"cwd"`
}

func (s *Service) handleCreateContext(w http.ResponseWriter, r *http.Request) {
	var req createContextRequest
	if err := decodeBody(r, &req, true); err != nil {
		writeText(w, http.StatusBadRequest, err.Error())
		return
	}
	c, err := s.createContext(r.Context(), str(req.Language), str(req.Cwd))
	if errors.Is(err, errUnsupported) {
		writeText(w, http.StatusBadRequest, fmt.Sprintf("Unsupported language: %s", str(req.Language)))
		return
	}
	if err != nil {
		s.log.Error("create context", "err", err)
		writeText(w, http.StatusInternalServerError, fmt.Sprintf("Failed to create context: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (s *Service) handleRemoveContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.remove(id) {
		writeText(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

func (s *Service) handleRestartContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c := s.lookup(id)
	if c == nil {
		writeText(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.StartTimeout)
	defer cancel()
	if err := c.restart(ctx); err != nil {
		s.log.Error("restart context", "ctx", id, "err", err)
		writeText(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, nil)
}
