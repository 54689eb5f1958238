package benchcmd

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/bench/clustersim"
)

// clusterConfig is `moat bench --cluster`'s flags.
type clusterConfig struct {
	on          bool
	nodes       []int
	sandboxes   int
	fronts      int
	concurrency int
	nodeMemMB   int
	pgSettings  []string
}

// register adds the --cluster mode's flags to cmd.
func (c *clusterConfig) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&c.on, "cluster", false,
		"instead: scale by simulation: API servers' front doors and --nodes simulated nodes (mutual TLS, leases, "+
			"a create's store work without a runtime) in this process, on a private PostgreSQL it starts; "+
			"print creates/s, the create's p50/p99 and PostgreSQL statements per create for each node count "+
			"(needs Debian's postgresql-15; -v: the statements)")
	f.IntSliceVar(&c.nodes, "nodes", []int{10, 100, 500}, "with --cluster: simulated nodes, a comma list runs each")
	f.IntVar(&c.sandboxes, "sandboxes", 2000, "with --cluster: creates issued per run")
	f.IntVar(&c.fronts, "fronts", 2, "with --cluster: API servers (front doors), each with its own store pool")
	f.IntVar(&c.concurrency, "concurrency", 32, "with --cluster: clients creating at once")
	f.IntVar(&c.nodeMemMB, "node-memory", 64<<10, "with --cluster: memory each node offers, MiB (×4 overcommit; sandboxes take 512)")
	f.StringSliceVar(&c.pgSettings, "pg-setting", nil, "with --cluster: a PostgreSQL setting name=value for the private server, e.g. fsync=on")
}

// benchCluster runs the simulation once per node count and prints one
// row for each (and, verbose, each run's statements); a create that
// failed (other than a 503 when every node is full) fails it.
func benchCluster(cmd *cobra.Command, c clusterConfig, verbose bool) error {
	ctx := cmd.Context()
	log := slog.New(slog.DiscardHandler)
	if verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	env, err := clustersim.Start(ctx, c.pgSettings...)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer env.Close()
	out := cmd.OutOrStdout()
	var rs []clustersim.Result
	for _, n := range c.nodes {
		res, err := env.Run(ctx, clustersim.Config{Nodes: n, Sandboxes: c.sandboxes, Fronts: c.fronts,
			Concurrency: c.concurrency, NodeMemoryMB: c.nodeMemMB, Log: log})
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if verbose {
			clustersim.PrintStatements(out, res, 12)
		}
		rs = append(rs, res)
	}
	clustersim.PrintTable(out, rs)
	for _, r := range rs {
		if r.Failed > 0 { // refusals (503: every node full) are the bench's answer; failures are not
			return fmt.Errorf("bench: %d of %d creates failed with %d nodes; the first: %s", r.Failed, r.Sandboxes, r.Nodes, r.FirstError)
		}
	}
	return nil
}
