package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/cli/templatebuild"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
	"github.com/moatsh/moat/internal/template/catalog"
)

// localTemplateCommands are the template commands that work on the server
// host's data directory.
func localTemplateCommands() []*cobra.Command { return []*cobra.Command{newTemplateListCmd()} }

// localBuildHelp describes `template build NAME`.
func localBuildHelp() string {
	return "Without --dockerfile: build a built-in template's root filesystem with mmdebstrap and\n" +
		"install envd into it (an unchanged template is reused from the cache; only envd is\n" +
		"refreshed). Known templates: " + fmt.Sprint(catalog.Names())
}

// localBuildFlags configure the local build of a built-in template.
type localBuildFlags struct {
	dataDir, envd string
	runtime       string // the template's own runtime ("" = the server's default)
	noAptCache    bool
}

func (f *localBuildFlags) register(cmd *cobra.Command) {
	addDataDirFlag(cmd, &f.dataDir)
	addEnvdFlag(cmd, &f.envd)
	cmd.Flags().BoolVar(&f.noAptCache, "no-apt-cache", false, "do not use the shared .deb cache")
	cmd.Flags().StringVar(&f.runtime, "runtime", "",
		"runtime the template's sandboxes run on unless a create's metadata moat.runtime says otherwise "+
			"(container|gvisor|vm; default: the server's default)")
}

func (f *localBuildFlags) run(cmd *cobra.Command, name string) error {
	ctx := cmd.Context()
	force, _ := cmd.Flags().GetBool("force")
	def, err := catalog.Lookup(name)
	if err != nil {
		return err
	}
	envd, err := template.FindEnvd(f.envd)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.dataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	db, err := store.Open(ctx, storePath(f.dataDir))
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := template.Build(ctx, def, template.Options{
		DataDir: f.dataDir, EnvdPath: envd, Out: os.Stderr, Logger: slog.Default(),
		Force: force, NoAptCache: f.noAptCache,
	})
	if err != nil {
		return err
	}
	if err := template.Register(ctx, db, def, res); err != nil {
		return err
	}
	if err := setTemplateRuntime(ctx, db, res.Name, f.runtime); err != nil {
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
}

func newTemplateListCmd() *cobra.Command {
	var dataDir string
	var noSize bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List templates with their last build's status and their size on disk",
		Long: "List the templates in the data directory: the last build's status (builds over the API),\n" +
			"and the disk space of the root filesystem and of the microVM images made from it\n" +
			"(--no-size skips measuring them).",
		Args: cobra.NoArgs,
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
			fmt.Fprintln(w, "ID\tNAME\tTEAM\tSTATUS\tBUILD\tCPU\tMEMORY\tDISK\tROOTFS\tVM IMAGES\tENVD\tUPDATED\tSPAWNS")
			for _, t := range ts {
				row, err := listRow(ctx, db, dataDir, t, !noSize)
				if err != nil {
					return err
				}
				fmt.Fprintln(w, row)
			}
			return w.Flush()
		},
	}
	addDataDirFlag(cmd, &dataDir)
	cmd.Flags().BoolVar(&noSize, "no-size", false, "do not measure the templates' disk space")
	return cmd
}

// listRow is one template's line of `template list`.
func listRow(ctx context.Context, db *store.DB, dataDir string, t store.Template, sizes bool) (string, error) {
	// Templates built with the CLI are shared ("-"); those built over
	// the API belong to the building team.
	team, err := db.TemplateOwner(ctx, t.ID)
	if err != nil {
		return "", err
	}
	status := "ready"
	if team != "" {
		builds, err := db.ListBuilds(ctx, team, t.ID)
		if err != nil {
			return "", err
		}
		if len(builds) > 0 {
			status = builds[0].Status // the latest
		}
	} else {
		team = "-"
	}
	rootfs, vmImages := "-", "-"
	if sizes {
		rootfs = templatebuild.HumanBytes(template.DiskUsage(t.RootfsDir))
		vmImages = templatebuild.HumanBytes(vmImageUsage(dataDir, t.ID))
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%.12s\t%d\t%dMB\t%dMB\t%s\t%s\t%s\t%s\t%d", t.ID, t.Name, team, status, t.BuildID,
		t.CPUCount, t.MemoryMB, t.DiskSizeMB, rootfs, vmImages, t.EnvdVersion,
		t.UpdatedAt.Local().Format(time.DateTime), t.SpawnCount), nil
}

// vmImageUsage is the disk space of the microVM runtime's images and
// snapshots of template id: <DataDir>/vm/templates/<key>-<stamp>, the key
// spelled as the vm backend spells it (snapshot.TemplateKey in runtime/vm/snapshot).
func vmImageUsage(dataDir, id string) int64 {
	key := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, strings.ToLower(id))
	if len(key) > 32 {
		key = key[:32]
	}
	dirs, _ := filepath.Glob(filepath.Join(dataDir, "vm", "templates", key+"-*"))
	var n int64
	for _, d := range dirs {
		if stamp := strings.TrimPrefix(filepath.Base(d), key+"-"); len(stamp) == 12 && !strings.Contains(stamp, "-") {
			n += template.DiskUsage(d)
		}
	}
	return n
}

// setTemplateRuntime records rt as the runtime of template name (a
// registration clears it, so "" leaves none).
func setTemplateRuntime(ctx context.Context, db *store.DB, name, rt string) error {
	if rt == "" {
		return nil
	}
	if !slices.Contains(runtime.Names(), rt) {
		return fmt.Errorf("--runtime %q: want one of %v", rt, runtime.Names())
	}
	t, err := db.GetTemplate(ctx, name)
	if err != nil {
		return err
	}
	t.Runtime = rt
	if err := db.UpsertTemplate(ctx, t); err != nil {
		return fmt.Errorf("template %s: runtime: %w", name, err)
	}
	return nil
}
