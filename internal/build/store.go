package build

import (
	"context"

	"github.com/moatsh/moat/internal/store"
)

// Store is the persistence a Manager uses: exactly the methods it calls,
// so that a second implementation (PostgreSQL, for scale-out) can stand in
// for the default SQLite one (*store.DB) without changes here. The record
// types stay in package store, the data model every implementation shares.
//
// Errors are errdefs kinds (test them with errors.Is); see each method.
// internal/storetest checks an implementation against them.
type Store interface {
	// GetTeamTemplate finds a template team may use, shared or its own;
	// another team's is errdefs.ErrNotFound.
	GetTeamTemplate(ctx context.Context, team, idOrName string) (store.Template, error)
	// TemplateConfigOf returns what template id's build set for its
	// processes; the zero value for a template without one.
	TemplateConfigOf(ctx context.Context, id string) (store.TemplateConfig, error)
	// StartBuild moves a waiting build to building; one that is not
	// waiting is errdefs.ErrFailedPrecondition.
	StartBuild(ctx context.Context, id string) error
	// FailBuild marks a build failed with reason and the failing step.
	FailBuild(ctx context.Context, id, reason, step string) error
	// FailUnfinishedBuilds marks every waiting or building build failed
	// and returns how many.
	FailUnfinishedBuilds(ctx context.Context, reason string) (int, error)
	// FinishBuild registers template t with cfg and marks build b ready in
	// one step; a name that is someone else's is errdefs.ErrAlreadyExists
	// (and the build fails).
	FinishBuild(ctx context.Context, b store.Build, t store.Template, cfg store.TemplateConfig) error
}
