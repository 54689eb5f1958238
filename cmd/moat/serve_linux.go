package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/store"
)

func newServeCmd() *cobra.Command {
	var (
		cfg   app.Config
		bf    backendFlags
		pools []string
		hooks []string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the API server, sandbox proxy and orchestrator",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Pools, err = parsePools(pools); err != nil {
				return err
			}
			if cfg.WebhookAllow, err = parseCIDRs("--webhook-allow-cidr", hooks); err != nil {
				return err
			}
			cfg.Backends = bf.backends()
			cfg.Logger = slog.Default()
			cfg.Stdout, cfg.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if err := app.Serve(cmd.Context(), cfg); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "addr", envOr(defaultAddr, "MOAT_ADDR"), "listen address HOST:PORT (env MOAT_ADDR)")
	addDataDirFlag(cmd, &cfg.DataDir)
	f.StringVar(&cfg.Store, "store", envOr("", "MOAT_STORE"),
		"where state lives: a postgres://USER@HOST/DB URL (PostgreSQL; several servers share one with --node-addr or --role api), "+
			"else the SQLite file DATA-DIR/moat.db (env "+app.StoreEnv+"; the other commands read it too)")
	f.StringVar(&cfg.NodeID, "node-id", envOr("", "MOAT_NODE_ID"),
		"this server's ID in the store's node registry, which `moat cluster nodes` lists "+
			"(env MOAT_NODE_ID; default: the ID in DATA-DIR/node-id, written at the first start from the host name, "+
			"with -s<scope> for a scoped server); a server reconciles only its own node's sandboxes, so keep it stable")
	f.StringVar(&cfg.Role, "role", envOr("", "MOAT_ROLE"),
		"what this server does in a cluster: api (the API and sandbox proxy, sending on what another node holds), "+
			"node (runs the sandboxes placement gives it) or api,node (env MOAT_ROLE; default api,node)")
	f.StringVar(&cfg.NodeAddr, "node-addr", envOr("", "MOAT_NODE_ADDR"),
		"where this node's API listens for the cluster's servers, HOST:PORT that they can dial (mutual TLS under "+
			"the cluster CA; the certificate of `moat cluster join --dir DATA-DIR/cluster-node`, else one from "+
			"DATA-DIR/cluster-ca); setting it lets servers share the store. An API server's serves the templates "+
			"built on it to the nodes (env MOAT_NODE_ADDR)")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", envOr("", "MOAT_METRICS_ADDR"),
		"where Prometheus' /metrics listens, HOST:PORT, a listener apart from --addr's (env MOAT_METRICS_ADDR; default: off)")
	f.StringVar(&cfg.Runtime, "runtime", envOr("", "MOAT_RUNTIME"),
		"sandbox runtimes, comma-separated, run side by side: container (crun or runc), gvisor (runsc), "+
			"vm (QEMU microVMs). The first is the default; a create runs on the runtime its metadata "+
			orchestrator.MetadataRuntime+" names, else on its template's runtime (template build --runtime), "+
			"else on the default; a runtime not listed here is refused (env MOAT_RUNTIME; default: container)")
	bf.register(cmd)
	addEnvdFlag(cmd, &cfg.EnvdPath)
	f.StringVar(&cfg.DNSUpstream, "dns-upstream", envOr("", "MOAT_DNS_UPSTREAM"),
		"resolvers that allowed names of network.allowOut domain rules are forwarded to: ip or ip:port, comma-separated "+
			"(env MOAT_DNS_UPSTREAM; default: the host's /etc/resolv.conf)")
	f.StringVar(&cfg.EgressUpstreamCA, "egress-upstream-ca", envOr("", "MOAT_EGRESS_UPSTREAM_CA"),
		"PEM file of extra roots (a private CA) that requests given network.rules headers may be forwarded to, "+
			"besides the system roots (env MOAT_EGRESS_UPSTREAM_CA)")
	f.DurationVar(&cfg.MaxTimeout, "max-timeout", 24*time.Hour, "longest sandbox timeout a client may ask for")
	f.StringVar(&cfg.Domain, "domain", envOr("", "MOAT_DOMAIN"),
		"domain for sandbox hosts {port}-{id}.DOMAIN (env MOAT_DOMAIN)")
	f.IntVar(&cfg.Admission.Concurrency, "max-concurrent-ops", admission.DefaultConcurrency,
		"creates, resumes, pauses and snapshots run at once; more wait in a queue where teams take turns")
	f.DurationVar(&cfg.Admission.MaxWait, "op-max-wait", admission.DefaultMaxWait,
		"longest a request is expected to wait in the queue (a client's earlier deadline shortens it); "+
			"a request that would wait longer gets 429 with the expected excess as Retry-After at once")
	f.IntVar(&cfg.Admission.Queue, "op-queue", admission.DefaultQueue,
		"requests that may wait at once, whatever the expected wait; beyond that 429 at once (-1: no queue)")
	f.Float64Var(&cfg.Capacity.MemOvercommit, "mem-overcommit", 4,
		"sandboxes may reserve this many times the host's memory; beyond that creates get 503")
	f.Float64Var(&cfg.Capacity.DiskOvercommit, "disk-overcommit", 8,
		"sandboxes may reserve this many times the data dir's filesystem (disks are sparse)")
	f.StringSliceVar(&hooks, "webhook-allow-cidr", envList("MOAT_WEBHOOK_ALLOW_CIDR"),
		"networks webhook deliveries may reach besides the public internet (loopback, private and link-local "+
			"addresses and this host's own are refused otherwise): CIDR, comma-separated or repeated "+
			"(env MOAT_WEBHOOK_ALLOW_CIDR)")
	f.StringArrayVar(&pools, "pool", nil,
		"keep N warm sandboxes of TEMPLATE ready for creates: TEMPLATE=N (repeatable)")
	return cmd
}

// parsePools reads --pool TEMPLATE=N values.
func parsePools(vals []string) ([]orchestrator.PoolSpec, error) {
	var out []orchestrator.PoolSpec
	seen := map[string]bool{}
	for _, v := range vals {
		name, n, ok := strings.Cut(v, "=")
		size, err := strconv.Atoi(n)
		if !ok || name == "" || err != nil || size < 0 || size > maxPoolSize {
			return nil, fmt.Errorf("--pool %q: want TEMPLATE=N with 0 <= N <= %d", v, maxPoolSize)
		}
		if seen[name] {
			return nil, fmt.Errorf("--pool %q: template %s given twice", v, name)
		}
		seen[name] = true
		out = append(out, orchestrator.PoolSpec{Template: name, Size: size})
	}
	return out, nil
}

// parseCIDRs reads a flag's CIDR blocks (an address alone is its /32 or /128).
func parseCIDRs(flag string, vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return nil, fmt.Errorf("%s %q: want a CIDR block such as 10.0.0.0/8 or an address", flag, v)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// envList is a comma-separated environment variable's values (nil when unset).
func envList(name string) []string {
	if v := os.Getenv(name); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// maxPoolSize bounds one warm pool.
const maxPoolSize = 1000

func newAPIKeyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "apikey", Short: "Manage API keys"}
	var dataDir, team string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create an API key; it is printed on the last line of stdout",
		Long: `Create an API key; it is printed on the last line of stdout.

Every key belongs to a team: sandboxes and snapshots belong to the team of
the key that created them, and keys of other teams can neither see nor
touch them. Templates are shared by all teams.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := app.CreateAPIKey(cmd.Context(), dataDir, team)
			if err != nil {
				return fmt.Errorf("create api key: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), key)
			return nil
		},
	}
	addDataDirFlag(create, &dataDir)
	create.Flags().StringVar(&team, "team", store.DefaultTeam,
		"team the key belongs to: 1-63 of a-z, 0-9, '_', '-', starting with a letter or digit")
	cmd.AddCommand(create)
	return cmd
}
