package orchestrator

import (
	"context"

	"github.com/moatsh/moat/internal/store"
)

// Store is the persistence the orchestrator uses: exactly the methods it
// calls, so that a second implementation (PostgreSQL, for scale-out) can
// stand in for the default SQLite one (*store.DB) without changes here.
// The record types (store.Sandbox, store.Template, ...) stay in package
// store: they are the data model that every implementation shares.
//
// Errors are errdefs kinds (test them with errors.Is): a lookup of an
// unknown record is errdefs.ErrNotFound, an insert whose ID (or snapshot
// name within its team) is taken errdefs.ErrAlreadyExists, a record without
// a valid team errdefs.ErrInvalidArgument. internal/storetest checks
// an implementation against these promises.
type Store interface {
	SandboxStore
	SnapshotStore
	TemplateReader
}

// SandboxStore keeps the sandbox records.
type SandboxStore interface {
	// InsertSandbox stores a new sandbox (ErrAlreadyExists, ErrInvalidArgument).
	InsertSandbox(ctx context.Context, s store.Sandbox) error
	// InsertSpawnedSandbox is InsertSandbox and counting one more sandbox
	// started from its template, in one transaction (a template deleted
	// meanwhile is no error).
	InsertSpawnedSandbox(ctx context.Context, s store.Sandbox) error
	// UpdateSandbox overwrites the record with s.ID, all but its team
	// (ErrNotFound).
	UpdateSandbox(ctx context.Context, s store.Sandbox) error
	// DeleteSandbox removes the record; an unknown ID is no error.
	DeleteSandbox(ctx context.Context, id string) error
	// ListSandboxes returns the sandboxes matching f in f's order.
	ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, error)
}

// SnapshotStore keeps the snapshot records.
type SnapshotStore interface {
	// InsertSnapshot stores s (ErrAlreadyExists for a taken ID or name,
	// ErrInvalidArgument).
	InsertSnapshot(ctx context.Context, s store.Snapshot) error
	// GetSnapshot returns team's snapshot whose ID or name is ref; another
	// team's is ErrNotFound, team "" looks in every team.
	GetSnapshot(ctx context.Context, team, ref string) (store.Snapshot, error)
	// ListSnapshots returns the snapshots matching f, newest first.
	ListSnapshots(ctx context.Context, f store.SnapshotFilter) ([]store.Snapshot, error)
	// DeleteSnapshot removes snapshot id (ErrNotFound).
	DeleteSnapshot(ctx context.Context, id string) error
}

// TemplateReader looks templates up.
type TemplateReader interface {
	// GetTemplate finds a template by ID or name (ErrNotFound).
	GetTemplate(ctx context.Context, idOrName string) (store.Template, error)
	// GetTeamTemplate finds a template team may use, shared or its own;
	// another team's is ErrNotFound.
	GetTeamTemplate(ctx context.Context, team, idOrName string) (store.Template, error)
	// ListTemplates returns every template, by name.
	ListTemplates(ctx context.Context) ([]store.Template, error)
	// TemplateConfigOf returns what template id's build set for its
	// processes; the zero value for a template without one.
	TemplateConfigOf(ctx context.Context, id string) (store.TemplateConfig, error)
}
