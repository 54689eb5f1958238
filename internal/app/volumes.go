package app

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
)

// recoverVolumes holds again the volumes of the sandboxes that survived
// the restart (Recover left only the live ones in the store).
func recoverVolumes(ctx context.Context, db *store.DB, api *server.Server) error {
	sbs, err := db.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return fmt.Errorf("recover volumes: %w", err)
	}
	return api.RecoverVolumes(sbs)
}
