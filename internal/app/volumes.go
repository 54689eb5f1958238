package app

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
)

// recoverVolumes holds again the volumes of node's sandboxes that
// survived the restart (Recover left only the live ones in the store and
// claimed those without a node); other nodes' sandboxes hold their own.
func recoverVolumes(ctx context.Context, db *store.DB, api *server.Server, node string) error {
	sbs, err := db.ListSandboxes(ctx, store.SandboxFilter{NodeID: node})
	if err != nil {
		return fmt.Errorf("recover volumes: %w", err)
	}
	return api.RecoverVolumes(sbs)
}
