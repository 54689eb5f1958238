package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/cluster/join"
	"github.com/moatsh/moat/internal/egress/tlsca"
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
			return withStore(cmd, dataDir, loc, func(db *store.DB) error { return printNodes(cmd, db) })
		},
	}
	addStoreFlags(nodes, &dataDir, &loc)
	cmd.AddCommand(nodes, newClusterTokenCmd(), newClusterJoinCmd())
	return cmd
}

// addStoreFlags registers --data-dir and --store, the store's location.
func addStoreFlags(cmd *cobra.Command, dataDir, loc *string) {
	addDataDirFlag(cmd, dataDir)
	cmd.Flags().StringVar(loc, "store", "", "the store: a postgres:// URL, else DATA-DIR/moat.db (env "+app.StoreEnv+")")
}

// withStore runs f on the store of --data-dir and --store.
func withStore(cmd *cobra.Command, dataDir, loc string, f func(*store.DB) error) error {
	db, err := store.Open(cmd.Context(), app.StoreLocation(dataDir, loc))
	if err != nil {
		return err
	}
	defer db.Close()
	return f(db)
}

// printNodes lists the node registry as a table.
func printNodes(cmd *cobra.Command, db *store.DB) error {
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
}

// newClusterTokenCmd is `moat cluster token`: a join token for one node.
func newClusterTokenCmd() *cobra.Command {
	var dataDir, loc string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Print a join token: one node, once, before it expires, gets its certificate with it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var tok string
			err := withStore(cmd, dataDir, loc, func(db *store.DB) (err error) {
				tok, err = join.NewToken(cmd.Context(), db, ttl, time.Now())
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			if ca, err := os.ReadFile(filepath.Join(app.ClusterCADir(dataDir), tlsca.CertFile)); err == nil {
				if h, err := join.CAHash(ca); err == nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "on the node: moat cluster join --api URL --token %s --ca-sha256 %s --node-id ID --dir DIR\n", tok, h)
				}
			}
			return nil
		},
	}
	addStoreFlags(cmd, &dataDir, &loc)
	cmd.Flags().DurationVar(&ttl, "ttl", join.DefaultTokenTTL, "how long the token is valid (at most 7 days)")
	return cmd
}

// newClusterJoinCmd is `moat cluster join`: a node gets its certificate.
func newClusterJoinCmd() *cobra.Command {
	var apiURL, token, nodeID, dir, caHash string
	cmd := &cobra.Command{
		Use:   "join --api URL --token TOKEN --node-id ID --dir DIR",
		Short: "Get this node's certificate from the cluster CA with a join token",
		Long: "Make this node's key, send its certificate request with the join token to an API server's\n" +
			join.Path + ", and write " + join.KeyFile + ", " + join.CertFile + ", " + join.CAFile + " and " + join.APIFile + " into DIR (the key mode 0600).\n" +
			"The node renews its certificate through that API server when two thirds of its 30 days have passed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if apiURL == "" || token == "" || nodeID == "" || dir == "" {
				return fmt.Errorf("--api, --token, --node-id and --dir are required")
			}
			key, cert, ca, err := join.Ask(cmd.Context(), &http.Client{Timeout: 30 * time.Second}, apiURL, token, nodeID)
			if err != nil {
				return err
			}
			if caHash != "" {
				if h, err := join.CAHash(ca); err != nil || !strings.EqualFold(h, caHash) {
					return fmt.Errorf("join: the API server's cluster CA has SHA-256 %s, not %s: refused (is %s the cluster's?)", h, caHash, apiURL)
				}
			}
			if err := join.Save(dir, apiURL, key, cert, ca); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "joined as %s: %s\n", nodeID, dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&apiURL, "api", "", "an API server's URL (http://HOST:PORT)")
	f.StringVar(&token, "token", "", "the join token `moat cluster token` printed")
	f.StringVar(&nodeID, "node-id", "", "this node's ID (lower-case letters, digits, '.' and '-')")
	f.StringVar(&dir, "dir", "", "where the node keeps its key and certificates")
	f.StringVar(&caHash, "ca-sha256", "", "the cluster CA's SHA-256 (moat cluster token prints it): refuse any other CA")
	return cmd
}
