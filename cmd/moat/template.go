package main

import (
	"fmt"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
)

func newTemplateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Build and list sandbox templates"}
	cmd.AddCommand(newTemplateBuildCmd(), newTemplateListCmd())
	return cmd
}

func newTemplateBuildCmd() *cobra.Command {
	var dataDir, envdFlag string
	var force, noAptCache bool
	cmd := &cobra.Command{
		Use:   "build NAME",
		Short: "Build a template's root filesystem (Debian via mmdebstrap, plus envd)",
		Long: "Build a template's root filesystem with mmdebstrap and install envd into it.\n" +
			"An unchanged template is reused from the cache; only envd is refreshed.\n" +
			"Known templates: " + fmt.Sprint(template.Names()),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			def, err := template.Lookup(args[0])
			if err != nil {
				return err
			}
			envd, err := template.FindEnvd(envdFlag)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dataDir, 0o755); err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
			db, err := store.Open(ctx, storePath(dataDir))
			if err != nil {
				return err
			}
			defer db.Close()
			res, err := template.Build(ctx, def, template.Options{
				DataDir: dataDir, EnvdPath: envd, Out: os.Stderr, Logger: slog.Default(),
				Force: force, NoAptCache: noAptCache,
			})
			if err != nil {
				return err
			}
			if err := template.Register(ctx, db, def, res); err != nil {
				return err
			}
			how := "built"
			if res.Cached {
				how = "reused from cache"
				if res.EnvdUpdated {
					how += ", envd updated"
				}
			}
			slog.Info("template ready", "template", res.Name, "build_id", res.BuildID,
				"rootfs", res.RootfsDir, "how", how, "took", res.Duration.Round(time.Millisecond))
			fmt.Fprintln(cmd.OutOrStdout(), res.Name)
			return nil
		},
	}
	addDataDirFlag(cmd, &dataDir)
	cmd.Flags().StringVar(&envdFlag, "envd", "",
		"envd binary to install (env "+template.EnvdEnv+"; default: envd next to the moat binary)")
	cmd.Flags().BoolVar(&force, "force", false, "rebuild even when the cached rootfs is up to date")
	cmd.Flags().BoolVar(&noAptCache, "no-apt-cache", false, "do not use the shared .deb cache")
	return cmd
}

func newTemplateListCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List built templates",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			db, err := store.Open(ctx, storePath(dataDir))
			if err != nil {
				return err
			}
			defer db.Close()
			ts, err := db.ListTemplates(ctx)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tNAME\tTEAM\tBUILD\tCPU\tMEMORY\tDISK\tENVD\tUPDATED\tSPAWNS")
			for _, t := range ts {
				// Templates built with the CLI are shared ("-"); those
				// built over the API belong to the building team.
				team, err := db.TemplateOwner(ctx, t.ID)
				if err != nil {
					return err
				}
				if team == "" {
					team = "-"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%.12s\t%d\t%dMB\t%dMB\t%s\t%s\t%d\n", t.ID, t.Name, team, t.BuildID,
					t.CPUCount, t.MemoryMB, t.DiskSizeMB, t.EnvdVersion,
					t.UpdatedAt.Local().Format(time.DateTime), t.SpawnCount)
			}
			return w.Flush()
		},
	}
	addDataDirFlag(cmd, &dataDir)
	return cmd
}
