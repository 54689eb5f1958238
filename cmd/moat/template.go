package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
)

func newTemplateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Build, list and remove sandbox templates"}
	cmd.AddCommand(newTemplateBuildCmd(), newTemplateListCmd(), newTemplateRmCmd())
	return cmd
}

func newTemplateBuildCmd() *cobra.Command {
	var local localBuildFlags
	var df dockerfileFlags
	cmd := &cobra.Command{
		Use:   "build NAME | build --dockerfile PATH [--context DIR] --name NAME",
		Short: "Build a built-in template locally, or a Dockerfile through a running server",
		Long: "Without --dockerfile: build a built-in template's root filesystem with mmdebstrap and\n" +
			"install envd into it (an unchanged template is reused from the cache; only envd is\n" +
			"refreshed). Known templates: " + fmt.Sprint(template.Names()) + "\n\n" +
			"With --dockerfile: translate the Dockerfile into E2B build steps and build it on the\n" +
			"server at --api-url through the REST API, as the SDKs' Template.build does (FROM an\n" +
			"image or a template, RUN, COPY/ADD of local files from --context, ENV, ARG, WORKDIR,\n" +
			"USER, CMD/ENTRYPOINT as the start command).",
		Args: cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if df.path != "" {
				return df.run(cmd, args)
			}
			if len(args) != 1 {
				return fmt.Errorf("template build: want NAME of a built-in template, or --dockerfile PATH --name NAME")
			}
			return local.run(cmd, args[0])
		},
	}
	local.register(cmd)
	df.register(cmd)
	return cmd
}

// localBuildFlags configure the local build of a built-in template.
type localBuildFlags struct {
	dataDir, envd     string
	runtime           string // the template's own runtime ("" = the server's default)
	force, noAptCache bool
}

func (f *localBuildFlags) register(cmd *cobra.Command) {
	addDataDirFlag(cmd, &f.dataDir)
	cmd.Flags().StringVar(&f.envd, "envd", "",
		"envd binary to install (env "+template.EnvdEnv+"; default: envd next to the moat binary)")
	cmd.Flags().BoolVar(&f.force, "force", false,
		"rebuild even when the cached rootfs is up to date (with --dockerfile: skip the build cache)")
	cmd.Flags().BoolVar(&f.noAptCache, "no-apt-cache", false, "do not use the shared .deb cache")
	cmd.Flags().StringVar(&f.runtime, "runtime", "",
		"runtime the template's sandboxes run on unless a create's metadata moat.runtime says otherwise "+
			"(container|gvisor|vm; default: the server's default)")
}

func (f *localBuildFlags) run(cmd *cobra.Command, name string) error {
	ctx := cmd.Context()
	def, err := template.Lookup(name)
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
		Force: f.force, NoAptCache: f.noAptCache,
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

// dockerfileFlags configure `template build --dockerfile`.
type dockerfileFlags struct {
	cf                     clientFlags
	path, contextDir, name string
	readyCmd               string
	cpu, mem               int
	buildArgs              []string
}

func (f *dockerfileFlags) register(cmd *cobra.Command) {
	f.cf.register(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&f.path, "dockerfile", "f", "", "build this Dockerfile on the server (see --api-url)")
	fl.StringVar(&f.contextDir, "context", "", "directory COPY and ADD read from (default: the Dockerfile's)")
	fl.StringVar(&f.name, "name", "", "template name (with --dockerfile)")
	fl.IntVar(&f.cpu, "cpu", 0, "vCPUs of the template's sandboxes (default: the server's)")
	fl.IntVar(&f.mem, "memory-mb", 0, "memory of the template's sandboxes in MiB (default: the server's)")
	fl.StringVar(&f.readyCmd, "ready-cmd", "", "command that exits 0 once the start command (CMD/ENTRYPOINT) is ready")
	fl.StringArrayVar(&f.buildArgs, "build-arg", nil, "ARG value NAME=VALUE (repeatable)")
}

func (f *dockerfileFlags) run(cmd *cobra.Command, args []string) error {
	name := f.name
	if name == "" && len(args) == 1 {
		name = args[0]
	}
	if name == "" || (len(args) == 1 && args[0] != name) {
		return fmt.Errorf("template build --dockerfile: want one template name (--name NAME)")
	}
	ctxDir, err := contextDirOf(f.path, f.contextDir)
	if err != nil {
		return err
	}
	bargs, err := parseKV(f.buildArgs)
	if err != nil {
		return fmt.Errorf("--build-arg: %w", err)
	}
	force, _ := cmd.Flags().GetBool("force")
	b := &dockerfileBuild{api: newTemplateAPI(&f.cf), path: f.path, contextDir: ctxDir, name: name,
		cpu: f.cpu, mem: f.mem, readyCmd: f.readyCmd, buildArgs: bargs, force: force,
		out: cmd.ErrOrStderr(), poll: 500 * time.Millisecond}
	if err := b.run(cmd.Context()); err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), name)
	return nil
}

func newTemplateRmCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:     "rm NAME|ID...",
		Aliases: []string{"remove", "delete"},
		Short:   "Delete templates built over the API (their files go once no sandbox uses them)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			api := newTemplateAPI(&cf)
			var errs []error
			for _, a := range args {
				if err := api.deleteTemplate(cmd.Context(), a); err != nil {
					errs = append(errs, fmt.Errorf("template %s: %w", a, err))
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), a)
			}
			return errors.Join(errs...)
		},
	}
	cf.register(cmd)
	return cmd
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
		rootfs = humanBytes(template.DiskUsage(t.RootfsDir))
		vmImages = humanBytes(vmImageUsage(dataDir, t.ID))
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%.12s\t%d\t%dMB\t%dMB\t%s\t%s\t%s\t%s\t%d", t.ID, t.Name, team, status, t.BuildID,
		t.CPUCount, t.MemoryMB, t.DiskSizeMB, rootfs, vmImages, t.EnvdVersion,
		t.UpdatedAt.Local().Format(time.DateTime), t.SpawnCount), nil
}

// vmImageUsage is the disk space of the microVM runtime's images and
// snapshots of template id: <DataDir>/vm/templates/<key>-<stamp>, the key
// spelled as the vm backend spells it (templateKey in runtime/vm).
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
