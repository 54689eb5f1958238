// Package templateapi serves E2B's template build API (Template.build of
// the SDKs): build requests, COPY sources uploaded through signed URLs,
// build starts and build status. The server mounts its handlers behind
// its API-key check and passes what they need in Deps; the builds
// themselves run in internal/build.
package templateapi

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"time"

	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/store"
)

// Config enables the template build API; without it the server answers
// those routes with 501.
type Config struct {
	Manager *build.Manager
	DataDir string // uploaded COPY sources go to <DataDir>/build-files
	// UploadKey signs upload URLs; New fills a random one (URLs then end
	// with the process).
	UploadKey []byte
	UploadTTL time.Duration    // lifetime of an upload URL (default 1 hour)
	Now       func() time.Time // tests
}

func (b *Config) fill() {
	if len(b.UploadKey) == 0 {
		b.UploadKey = make([]byte, 32)
		_, _ = rand.Read(b.UploadKey)
	}
	if b.UploadTTL <= 0 {
		b.UploadTTL = time.Hour
	}
}

// Store is what the API reads and writes of the database.
type Store interface {
	RequestBuild(ctx context.Context, team, name string, cpuCount, memoryMB int) (store.Build, error)
	GetBuild(ctx context.Context, team, templateID, buildID string) (store.Build, error)
	TeamOwnsTemplateID(ctx context.Context, team, templateID string) (bool, error)
}

// Deps is what the API uses of the server it is mounted on.
type Deps struct {
	Store Store
	Log   *slog.Logger
	// Team is the caller's team, which the server's API-key check put in
	// the request.
	Team func(*http.Request) string
	// Fail answers with err as E2B's JSON error and logs it once.
	Fail func(http.ResponseWriter, *http.Request, error)
	// Decode reads a required JSON body into v; when it fails it has
	// answered already (400, or 413 for an oversize body).
	Decode func(w http.ResponseWriter, r *http.Request, v any) bool
}

// API holds the build API's handlers.
type API struct {
	cfg *Config
	d   Deps
}

// New returns the API over cfg, filling cfg's defaults.
func New(cfg *Config, deps Deps) *API {
	cfg.fill()
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &API{cfg: cfg, d: deps}
}

// optional is v as an optional field: nil (omitted) when empty.
func optional(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}
