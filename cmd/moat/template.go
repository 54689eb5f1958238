package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/cli/templatebuild"
)

// The template commands that talk to a server (build --dockerfile, rm) are
// here and build on every OS; building a built-in template and listing the
// data directory's templates work on the server host's files and are in
// template_local_linux.go.

func newTemplateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Build, list and remove sandbox templates"}
	cmd.AddCommand(newTemplateBuildCmd(), newTemplateRmCmd())
	cmd.AddCommand(localTemplateCommands()...)
	return cmd
}

func newTemplateBuildCmd() *cobra.Command {
	var local localBuildFlags
	var df dockerfileFlags
	cmd := &cobra.Command{
		Use:   "build NAME | build --dockerfile PATH [--context DIR] --name NAME",
		Short: "Build a built-in template locally, or a Dockerfile through a running server",
		Long: localBuildHelp() + "\n\n" +
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
	cmd.Flags().Bool("force", false,
		"rebuild even when the cached rootfs is up to date (with --dockerfile: skip the build cache)")
	return cmd
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
	bargs, err := parseKV(f.buildArgs)
	if err != nil {
		return fmt.Errorf("--build-arg: %w", err)
	}
	force, _ := cmd.Flags().GetBool("force")
	err = templatebuild.Run(cmd.Context(), templatebuild.Options{APIURL: f.cf.apiURL, APIKey: f.cf.apiKey,
		Dockerfile: f.path, ContextDir: f.contextDir, Name: name, CPU: f.cpu, MemoryMB: f.mem, ReadyCmd: f.readyCmd,
		BuildArgs: bargs, Force: force, Progress: cmd.ErrOrStderr()})
	if err != nil {
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
			var errs []error
			for _, a := range args {
				if err := templatebuild.Delete(cmd.Context(), cf.apiURL, cf.apiKey, a); err != nil {
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
