package app

import (
	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
)

// The SQLite store is the default implementation of the interfaces its
// users declare; a second one (PostgreSQL) would be asserted here too.
var (
	_ orchestrator.Store = (*store.DB)(nil)
	_ server.Store       = (*store.DB)(nil)
	_ build.Store        = (*store.DB)(nil)
	_ templateLister     = (*store.DB)(nil)
)
