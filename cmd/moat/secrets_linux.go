package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/app"
)

func newSecretsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "secrets", Short: "Manage the encryption of secrets at rest"}
	var dataDir string
	rotate := &cobra.Command{
		Use:   "rotate-key",
		Short: "Add a new secrets key and re-encrypt every stored secret with it",
		Long: `Add a new key to <data dir>/secrets.key, make it the key new secrets
are encrypted with, and re-encrypt every stored version of every secret
with it, in one transaction. Run it with the server stopped (it takes the
data dir's lock). The older key lines stay in the file, unused; delete them
once you no longer need to restore an older database backup.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, n, err := app.RotateSecretsKey(cmd.Context(), dataDir)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "new secrets key %s; %d secret versions re-encrypted\n", id, n)
			return nil
		},
	}
	addDataDirFlag(rotate, &dataDir)
	cmd.AddCommand(rotate)
	return cmd
}
