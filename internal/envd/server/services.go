package server

import (
	"log/slog"

	"github.com/moatsh/moat/internal/envd/filesystem"
	"github.com/moatsh/moat/internal/envd/process"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/users"
)

// newServices builds the Connect services envd mounts.
func newServices(st *state.State, u *users.Resolver, log *slog.Logger) []Service {
	return []Service{
		process.NewService(st, u, log.With("service", "process")),
		filesystem.NewService(st, u, log.With("service", "filesystem")),
	}
}

// chownFunc gives files created by /files uploads to their user.
func chownFunc(path string, u *users.User) error { return filesystem.Chown(path, u) }
