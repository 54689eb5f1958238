package server

import (
	"context"

	"github.com/moatsh/moat/internal/server/eventapi"
	"github.com/moatsh/moat/internal/server/volumeapi"
	"github.com/moatsh/moat/internal/store"
)

// Store is the persistence the REST handlers use directly (sandboxes go
// through the orchestrator): exactly the methods they call, so that a
// second implementation (PostgreSQL, for scale-out) can stand in for the
// default SQLite one (*store.DB) without changes here. The record types
// stay in package store, the data model every implementation shares.
//
// Errors are errdefs kinds (test them with errors.Is), which the handlers
// map to HTTP statuses: an unknown or another team's record is
// errdefs.ErrNotFound, a taken template name errdefs.ErrAlreadyExists, a
// template with a build running errdefs.ErrFailedPrecondition, a shared
// one store.ErrSharedTemplate (also ErrFailedPrecondition).
// internal/storetest checks an implementation against these promises.
type Store interface {
	APIKeyChecker
	APIKeyStore
	TemplateStore
	BuildStore
	VolumeStore
	EventStore
}

// EventStore keeps teams' lifecycle events and webhooks (see eventapi.Store).
type EventStore = eventapi.Store

// APIKeyChecker authenticates requests.
type APIKeyChecker interface {
	// CheckAPIKey reports whether key is a known API key and, if so, its team.
	CheckAPIKey(ctx context.Context, key string) (team string, ok bool, err error)
}

// APIKeyStore keeps a team's API keys (the /api-keys API, apikeys.go).
type APIKeyStore interface {
	// CreateNamedAPIKey makes a key for team and returns it as listed and
	// its value (ErrInvalidArgument for a name past store.MaxAPIKeyName).
	CreateNamedAPIKey(ctx context.Context, team, name string) (store.APIKey, string, error)
	// ListAPIKeys returns team's keys, oldest first, never their values.
	ListAPIKeys(ctx context.Context, team string) ([]store.APIKey, error)
	// RenameAPIKey and DeleteAPIKey act on team's key id; another team's
	// or an unknown one is ErrNotFound.
	RenameAPIKey(ctx context.Context, team, id, name string) error
	DeleteAPIKey(ctx context.Context, team, id string) error
	// APIKeyID is the ID of the key whose value is key ("" for none).
	APIKeyID(ctx context.Context, key string) (string, error)
}

// TemplateStore looks up and deletes templates for a team.
type TemplateStore interface {
	// GetTemplate finds a template by ID or name (ErrNotFound).
	GetTemplate(ctx context.Context, idOrName string) (store.Template, error)
	// GetTeamTemplate finds a template team may use, shared or its own;
	// another team's is ErrNotFound.
	GetTeamTemplate(ctx context.Context, team, idOrName string) (store.Template, error)
	// ListTeamTemplates returns the templates team may use, by name.
	ListTeamTemplates(ctx context.Context, team string) ([]store.Template, error)
	// TemplateOwner returns the team owning template id, "" for a shared
	// one (ErrNotFound).
	TemplateOwner(ctx context.Context, id string) (string, error)
	// TeamOwnsTemplateID reports whether templateID is team's, registered
	// or with a build of team.
	TeamOwnsTemplateID(ctx context.Context, team, templateID string) (bool, error)
	// DeleteTeamTemplate removes team's template and its builds and returns
	// it (ErrNotFound, ErrSharedTemplate, ErrFailedPrecondition).
	DeleteTeamTemplate(ctx context.Context, team, idOrName string) (store.Template, error)
}

// BuildStore records template builds requested through the API.
type BuildStore interface {
	// RequestBuild starts a build of team's template name, keeping the ID
	// of team's template of that name (ErrAlreadyExists for a name that is
	// someone else's).
	RequestBuild(ctx context.Context, team, name string, cpuCount, memoryMB int) (store.Build, error)
	// GetBuild returns a build of team's template (ErrNotFound).
	GetBuild(ctx context.Context, team, templateID, buildID string) (store.Build, error)
	// ListBuilds returns the builds of team's template, newest first.
	ListBuilds(ctx context.Context, team, templateID string) ([]store.Build, error)
}

// VolumeStore keeps teams' volumes (see volumeapi.Store).
type VolumeStore = volumeapi.Store
