// Package interpreter serves the E2B code-interpreter HTTP API (port
// 49999): /execute streams NDJSON output of code run in a context backed by
// a Jupyter kernel (or the built-in bash runner), and /contexts manages
// those contexts.
package interpreter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/jupyter"
)

// Config configures a Service.
type Config struct {
	// Env returns envd's environment variables; they are set in each
	// context's kernel before its first execution. May be nil.
	Env func() map[string]string
	// WarmPython starts the default Python context when the service starts.
	WarmPython bool
	// DefaultCwd is the working directory of contexts created without one
	// ("/home/user" when empty).
	DefaultCwd string
	// Python overrides the interpreter of the python3 kernelspec.
	Python string
	// KernelEnv holds extra KEY=VALUE entries for every kernel process
	// (e.g. HOME and USER when Credential is set).
	KernelEnv []string
	// Credential runs kernels and the bash runner as another user (E2B
	// runs them as "user"); nil keeps envd's user.
	Credential *syscall.Credential
	// ConnDir holds connection files and bash cells (os.TempDir() if empty).
	ConnDir string
	// StartTimeout bounds a kernel start (60 s when zero).
	StartTimeout time.Duration
	// Logger receives diagnostics (slog.Default() when nil).
	Logger *slog.Logger
}

// Service is the code-interpreter API and the contexts it owns.
type Service struct {
	cfg Config
	log *slog.Logger

	createMu sync.Mutex // serialises default-context creation
	mu       sync.Mutex // guards contexts, defaults, order, closed
	contexts map[string]*execContext
	defaults map[string]string // public language -> context id
	order    []string
	closed   bool
}

// execContext is one code context: a runner, an execution lock and the
// env bookkeeping.
type execContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`

	lang     language
	lock     chan struct{} // capacity 1: executions are serialised
	restarts atomic.Int64

	mu        sync.Mutex // guards r, envLoaded
	r         runner
	envLoaded bool
}

// NewService returns a Service; with cfg.WarmPython the default Python
// context starts in the background.
func NewService(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DefaultCwd == "" {
		cfg.DefaultCwd = "/home/user"
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	s := &Service{
		cfg: cfg, log: cfg.Logger.With("component", "interpreter"),
		contexts: map[string]*execContext{}, defaults: map[string]string{},
	}
	if cfg.WarmPython {
		go func() {
			start := time.Now()
			if _, err := s.defaultContext(context.Background(), "python"); err != nil {
				s.log.Warn("warm python context", "err", err)
				return
			}
			s.log.Info("python context warm", "took", time.Since(start))
		}()
	}
	return s
}

// Close stops every kernel.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	ctxs := make([]*execContext, 0, len(s.contexts))
	for _, c := range s.contexts {
		ctxs = append(ctxs, c)
	}
	s.contexts, s.defaults, s.order = map[string]*execContext{}, map[string]string{}, nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range ctxs {
		wg.Add(1)
		go func() { defer wg.Done(); c.close() }()
	}
	wg.Wait()
}

var errUnsupported = errors.New("unsupported language")

// createContext starts a runner for a new context.
func (s *Service) createContext(ctx context.Context, rawLang, cwd string) (*execContext, error) {
	lang, ok := languages[normalizeLanguage(rawLang)]
	if !ok {
		return nil, fmt.Errorf("%w: %q", errUnsupported, rawLang)
	}
	if cwd == "" {
		cwd = s.cfg.DefaultCwd
	}
	c := &execContext{ID: newContextID(), Language: publicLanguage(rawLang), Cwd: cwd, lang: lang, lock: make(chan struct{}, 1)}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StartTimeout)
	defer cancel()
	r, err := s.startRunner(ctx, lang, cwd)
	if err != nil {
		return nil, err
	}
	c.r = r
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		go r.close()
		return nil, errors.New("interpreter service closed")
	}
	s.contexts[c.ID] = c
	s.order = append(s.order, c.ID)
	return c, nil
}

func (s *Service) startRunner(ctx context.Context, lang language, cwd string) (runner, error) {
	if lang.spec == nil {
		return startBash(s.cfg, cwd)
	}
	return startKernel(ctx, s.cfg, lang, cwd)
}

// defaultContext returns (creating on first use) the language's default
// context.
func (s *Service) defaultContext(ctx context.Context, rawLang string) (*execContext, error) {
	key := publicLanguage(rawLang)
	if _, ok := languages[normalizeLanguage(rawLang)]; !ok {
		return nil, fmt.Errorf("%w: %q", errUnsupported, rawLang)
	}
	if c := s.lookupDefault(key); c != nil {
		return c, nil
	}
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if c := s.lookupDefault(key); c != nil {
		return c, nil
	}
	c, err := s.createContext(ctx, rawLang, "")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.defaults[key] = c.ID
	s.mu.Unlock()
	return c, nil
}

func (s *Service) lookupDefault(key string) *execContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contexts[s.defaults[key]]
}

func (s *Service) lookup(id string) *execContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contexts[id]
}

// list returns the contexts in creation order.
func (s *Service) list() []*execContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*execContext, 0, len(s.order))
	for _, id := range s.order {
		if c, ok := s.contexts[id]; ok {
			out = append(out, c)
		}
	}
	return out
}

// remove deletes a context and stops its runner; false if unknown.
func (s *Service) remove(id string) bool {
	s.mu.Lock()
	c, ok := s.contexts[id]
	if ok {
		delete(s.contexts, id)
		for k, v := range s.defaults {
			if v == id {
				delete(s.defaults, k)
			}
		}
		for i, o := range s.order {
			if o == id {
				s.order = append(s.order[:i:i], s.order[i+1:]...)
				break
			}
		}
	}
	s.mu.Unlock()
	if ok {
		c.close()
	}
	return ok
}

func (c *execContext) close() {
	c.mu.Lock()
	r := c.r
	c.mu.Unlock()
	if r != nil {
		r.close()
	}
}

// restart replaces the context's runtime with a fresh one.
func (c *execContext) restart(ctx context.Context) error {
	c.restarts.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.envLoaded = false
	if err := c.r.restart(ctx); err != nil {
		return fmt.Errorf("restart context %s: %w", c.ID, err)
	}
	return nil
}

// ensure returns a live runner, restarting a dead one.
func (c *execContext) ensure(ctx context.Context) (runner, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.r.dead() {
		c.envLoaded = false
		if err := c.r.restart(ctx); err != nil {
			return nil, fmt.Errorf("restart dead %s kernel: %w", c.lang.name, err)
		}
	}
	return c.r, nil
}

// acquire takes the execution lock or gives up when ctx ends.
func (c *execContext) acquire(ctx context.Context) error {
	select {
	case c.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for context %s: %w", c.ID, ctx.Err())
	}
}

func (c *execContext) release() { <-c.lock }

func newContextID() string { return jupyter.NewID() }
