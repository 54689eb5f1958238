// Package storetest is the conformance suite of Moat's store: the
// behaviour that the store's users (orchestrator.Store, server.Store,
// build.Store) rely on, checked through those interfaces only, so that the
// default SQLite implementation (*store.DB, see store's
// conformance_test.go) and a later one (PostgreSQL, for scale-out) run the
// same tests. What is particular to one implementation (SQLite's
// migrations, file modes, write queueing) stays in its own tests.
//
// The record types (store.Sandbox, store.Template, ...) live in package
// store beside the SQLite code: they are the data model every
// implementation shares, and the users already import that package for
// them; a second implementation imports it too and links SQLite, which
// stays the default, so a separate model package would only move files.
//
// Packages orchestrator, server and build must not import storetest from
// their in-package tests (storetest imports them for their interfaces).
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/cluster"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/secrets"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/webhook"
)

// Store is what an implementation must offer: the union of its users'
// interfaces, plus what the CLI and the app wiring use to seed it and the
// suite uses to read back what it wrote.
type Store interface {
	orchestrator.Store
	server.Store
	build.Store
	secrets.Store
	webhook.Store
	cluster.Store

	// UpsertTemplate inserts t or updates the template named t.Name in
	// place, keeping its ID, CreatedAt and spawn statistics; an empty
	// t.ID gets a random one, an empty name is errdefs.ErrInvalidArgument.
	UpsertTemplate(ctx context.Context, t store.Template) error
	// MarkTemplateSpawned counts one more sandbox started from template id
	// (what InsertSpawnedSandbox does in its transaction).
	MarkTemplateSpawned(ctx context.Context, id string, at time.Time) error
	// CreateAPIKey makes a key for team and returns its plaintext
	// (errdefs.ErrInvalidArgument for an invalid team).
	CreateAPIKey(ctx context.Context, team string) (string, error)
	// CountAPIKeys returns how many keys exist.
	CountAPIKeys(ctx context.Context) (int, error)
	// GetSandbox returns sandbox id (errdefs.ErrNotFound).
	GetSandbox(ctx context.Context, id string) (store.Sandbox, error)
	// GetNode returns node id (errdefs.ErrNotFound); DeleteNode forgets it.
	GetNode(ctx context.Context, id string) (store.Node, error)
	DeleteNode(ctx context.Context, id string) error
	// RecordTemplateCopy records that a node holds a checked copy of a
	// template's tree with a digest; TemplateHolders lists the nodes
	// holding one with that digest, by ID.
	RecordTemplateCopy(ctx context.Context, id, node, digest string) error
	TemplateHolders(ctx context.Context, id, digest string) ([]string, error)
	// NodeLoads returns every registered node with the memory and number
	// of its sandboxes that are not paused (what the cluster's front door
	// places by).
	NodeLoads(ctx context.Context) ([]store.NodeLoad, error)
}

// Run runs the suite; open returns a new, empty store for each test (and
// closes it with t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, d Store)
	}{
		{"Templates", templates},
		{"APIKeys", apiKeys},
		{"TeamBuilds", teamBuilds},
		{"TeamBuildsDelete", teamBuildsDelete},
		{"FailedBuilds", failedBuilds},
		{"SandboxCRUD", sandboxCRUD},
		{"ListSandboxes", listSandboxes},
		{"SandboxAutoResumeAndTimeout", sandboxAutoResumeAndTimeout},
		{"Snapshots", snapshotsCRUD},
		{"ListSnapshots", listSnapshots},
		{"Volumes", volumes},
		{"Secrets", secretsCRUD},
		{"ListSecrets", listSecrets},
		{"Events", eventsList},
		{"Webhooks", webhooksCRUD},
		{"Deliveries", deliveries},
		{"Nodes", nodes},
		{"SandboxNodes", sandboxNodes},
		{"NodeLoads", nodeLoads},
		{"TemplateCopies", templateCopies},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, open(t))
		})
	}
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// templateCopies: holders are listed by digest, and a node's newer copy
// replaces its older.
func templateCopies(t *testing.T, d Store) {
	ctx := context.Background()
	if err := d.UpsertTemplate(ctx, store.Template{ID: "tc", Name: "tc", RootfsDir: "/x", NodeID: "node-a", Digest: "d1"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"node-c", "d1"}, {"node-b", "d1"}, {"node-d", "d0"}} {
		if err := d.RecordTemplateCopy(ctx, "tc", c[0], c[1]); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := d.TemplateHolders(ctx, "tc", "d1"); err != nil || !equal(got, []string{"node-b", "node-c"}) {
		t.Fatalf("holders of d1: %v, %v", got, err)
	}
	if err := d.RecordTemplateCopy(ctx, "tc", "node-d", "d1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.TemplateHolders(ctx, "tc", "d1"); !equal(got, []string{"node-b", "node-c", "node-d"}) {
		t.Fatalf("after node-d's newer copy: %v", got)
	}
	if err := d.RecordTemplateCopy(ctx, "tc", "", "d1"); err == nil {
		t.Error("a copy without a node was recorded")
	}
}
