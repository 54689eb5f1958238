// Package filesystem implements envd's filesystem.Filesystem Connect service:
// stat, list, create, move and remove files inside the sandbox, and watch
// directories for changes, wire-compatible with E2B's envd so that the
// official E2B SDKs work against Moat unmodified.
//
// envd runs as root but acts for the user an RPC selects (Basic auth, else the
// default user): relative paths resolve against that user's home and
// directories created on its behalf are chowned to it. Access is not checked
// per user beyond what the OS enforces for envd itself; EACCES and EPERM from
// the OS surface as permission_denied.
package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"syscall"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/filesystem/filesystemconnect"
	"github.com/moatsh/moat/internal/envd/paths"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
)

// Service implements filesystemconnect.FilesystemHandler.
type Service struct {
	st    *state.State
	users *users.Resolver
	log   *slog.Logger

	mu      sync.Mutex
	closed  bool
	pollers map[string]*pollWatcher  // CreateWatcher watchers by id
	streams map[*dirWatcher]struct{} // watchers of live WatchDir streams
}

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// NewService returns the filesystem service. log may be nil.
func NewService(st *state.State, users *users.Resolver, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{
		st:      st,
		users:   users,
		log:     log.With("service", "filesystem"),
		pollers: map[string]*pollWatcher{},
		streams: map[*dirWatcher]struct{}{},
	}
}

// Handler returns the Connect handler and the path prefix to mount it on.
func (s *Service) Handler() (path string, h http.Handler) {
	return filesystemconnect.NewFilesystemHandler(s, connect.WithReadMaxBytes(16<<20), connect.WithCompressMinBytes(1024)) // as the process service
}

// Close stops all watchers, ending WatchDir streams and dropping the
// watchers of CreateWatcher. The service refuses new watchers afterwards.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	pollers := s.pollers
	streams := s.streams
	s.pollers = map[string]*pollWatcher{}
	s.streams = map[*dirWatcher]struct{}{}
	s.mu.Unlock()
	for _, p := range pollers {
		p.stop()
	}
	for w := range streams {
		w.Close()
	}
}

// resolve picks the user of a request and resolves p for it.
func (s *Service) resolve(h http.Header, p string) (string, *users.User, error) {
	u, err := s.users.Select(h, s.st.DefaultUser())
	if err != nil {
		return "", nil, err
	}
	abs, err := paths.Resolve(p, u.Home, s.st.DefaultWorkdir())
	if err != nil {
		return "", nil, err
	}
	return abs, u, nil
}

// osError gives err from a file system call on path an errdefs kind, with
// msg ("stat", "create directory", ...) as context.
func osError(msg, path string, err error) error {
	var kind error
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("file not found: %s (%s): %w", path, msg, errdefs.ErrNotFound)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		kind = errdefs.ErrPermissionDenied
	case errors.Is(err, fs.ErrExist):
		kind = errdefs.ErrAlreadyExists
	case errors.Is(err, syscall.ELOOP):
		kind = errdefs.ErrFailedPrecondition
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EINVAL):
		kind = errdefs.ErrInvalidArgument
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		kind = errdefs.ErrNoSpace
	case errors.Is(err, syscall.ENOMEM):
		kind = errdefs.ErrResourceExhausted
	case errors.Is(err, syscall.EXDEV), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EBUSY):
		kind = errdefs.ErrFailedPrecondition
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s %s: %w", msg, path, err)
	default:
		kind = errdefs.ErrInternal
	}
	if errors.Is(err, kind) {
		return fmt.Errorf("%s %s: %w", msg, path, err)
	}
	return fmt.Errorf("%s %s: %w: %w", msg, path, kind, unwrapPath(err))
}

// unwrapPath strips the *fs.PathError / *os.LinkError wrapper, whose text
// repeats the operation and path already in the message.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
