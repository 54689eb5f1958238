package main

import (
	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/cli/benchcmd"
)

// Defaults of the server-side flags that have environment variables.
const (
	defaultAddr    = "127.0.0.1:3000"
	defaultDataDir = "/var/lib/moat"
)

// serverCommands are the commands that run on the server host (Linux): they
// start sandboxes or work on its data directory. The client commands
// (sandbox, run, template build --dockerfile, template rm) talk to a server
// through sdk/go and build on every OS.
func serverCommands() []*cobra.Command {
	return []*cobra.Command{newServeCmd(), newAPIKeyCmd(), newBenchCmd(), newSecretsCmd(), newClusterCmd()}
}

// addDataDirFlag registers --data-dir (env MOAT_DATA_DIR).
func addDataDirFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "data-dir", envOr(defaultDataDir, "MOAT_DATA_DIR"),
		"state directory: database, templates, sandboxes (env MOAT_DATA_DIR)")
}

// storePath is where the state of the server with dataDir lives: $MOAT_STORE
// (a postgres:// URL) if set, else the SQLite database inside dataDir.
func storePath(dataDir string) string { return app.StoreLocation(dataDir, "") }

// newBenchCmd is `moat bench` with the client, data-directory and backend
// flags it shares with the other commands.
func newBenchCmd() *cobra.Command {
	var (
		cf      clientFlags
		dataDir string
		bf      backendFlags
	)
	cmd := benchcmd.New(benchcmd.Shared{Client: cf.client, DataDir: func() string { return dataDir },
		Backends: bf.backends})
	cf.register(cmd)
	addDataDirFlag(cmd, &dataDir)
	bf.register(cmd)
	return cmd
}
