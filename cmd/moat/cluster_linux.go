package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/store"
)

// newClusterCmd is `moat cluster`: the node registry of a store that
// servers share (docs/cluster.md).
func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "The node registry of the store servers share"}
	var dataDir, loc string
	nodes := &cobra.Command{
		Use:   "nodes",
		Short: "List the registered nodes, their lease and whether they are lost",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := store.Open(cmd.Context(), app.StoreLocation(dataDir, loc))
			if err != nil {
				return err
			}
			defer db.Close()
			ns, err := db.ListNodes(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tADDR\tRUNTIMES\tCPUS\tMEMORY\tSTATE\tLEASE\tSTARTED")
			now := time.Now()
			for _, n := range ns {
				state := "alive"
				switch {
				case n.Lost:
					state = "lost"
				case n.LeaseUntil.Before(now):
					state = "expired"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d MiB\t%s\t%s\t%s\n", n.ID, n.Addr, strings.Join(n.Runtimes, ","), n.CPUs,
					n.MemoryMB, state, n.LeaseUntil.Sub(now).Round(time.Second), n.StartedAt.Local().Format(time.DateTime))
			}
			return w.Flush()
		},
	}
	addDataDirFlag(nodes, &dataDir)
	nodes.Flags().StringVar(&loc, "store", "", "the store: a postgres:// URL, else DATA-DIR/moat.db (env "+app.StoreEnv+")")
	cmd.AddCommand(nodes)
	return cmd
}
