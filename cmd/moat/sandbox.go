package main

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	moat "github.com/moatsh/moat/sdk/go"
)

// clientFlags are the connection flags of every client command.
type clientFlags struct {
	apiURL, sandboxURL, apiKey string
}

func (f *clientFlags) register(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.apiURL, "api-url", envOr(moat.DefaultAPIURL, "MOAT_API_URL", "E2B_API_URL"),
		"Moat API URL (env MOAT_API_URL or E2B_API_URL)")
	pf.StringVar(&f.sandboxURL, "sandbox-url", envOr("", "MOAT_SANDBOX_URL", "E2B_SANDBOX_URL"),
		"sandbox proxy URL (env MOAT_SANDBOX_URL or E2B_SANDBOX_URL; default: the API URL)")
	pf.StringVar(&f.apiKey, "api-key", envOr("", "MOAT_API_KEY", "E2B_API_KEY"),
		"API key (env MOAT_API_KEY or E2B_API_KEY; create one with 'moat apikey create')")
}

func (f *clientFlags) client() *moat.Client {
	return &moat.Client{APIURL: f.apiURL, SandboxURL: f.sandboxURL, APIKey: f.apiKey}
}

// runFlags configure the command run by exec and run.
type runFlags struct {
	user, cwd string
	env       []string
}

func (f *runFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.user, "user", "u", "", "run as this user (default: the sandbox default, `user`)")
	cmd.Flags().StringVarP(&f.cwd, "cwd", "w", "", "working directory")
	cmd.Flags().StringArrayVarP(&f.env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
}

func (f *runFlags) options(cmd *cobra.Command) (moat.RunOptions, error) {
	envs, err := parseKV(f.env)
	if err != nil {
		return moat.RunOptions{}, err
	}
	return moat.RunOptions{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(), Envs: envs, Cwd: f.cwd, User: f.user}, nil
}

func parseKV(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want KEY=VALUE", p)
		}
		out[k] = v
	}
	return out, nil
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellJoin turns argv into the bash command line envd runs. A single
// argument is taken as a shell command as is (`moat run -- 'ls | wc -l'`);
// several are quoted one by one so they arrive unchanged
// (`moat run -- python3 -c 'print(1)'`).
func shellJoin(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		if shellSafe.MatchString(a) {
			quoted[i] = a
		} else {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}

// exitStatus maps envd's exit code to ours; -1 (killed by a signal) becomes
// 137, the shell's status for SIGKILL, the usual cause.
func exitStatus(code int) error {
	switch {
	case code == 0:
		return nil
	case code < 0:
		return exitError{code: 137}
	default:
		return exitError{code: code}
	}
}

func newSandboxCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{Use: "sandbox", Aliases: []string{"sb"}, Short: "Manage sandboxes on a Moat server"}
	cf.register(cmd)
	cmd.AddCommand(newSandboxCreateCmd(&cf), newSandboxListCmd(&cf), newSandboxGetCmd(&cf), newSandboxLogsCmd(&cf), newSandboxExecCmd(&cf), newSandboxShellCmd(&cf), newSandboxKillCmd(&cf),
		newSandboxPauseCmd(&cf), newSandboxResumeCmd(&cf), newSandboxSnapshotCmd(&cf), newSandboxSnapshotsCmd(&cf),
		newSandboxSnapshotRmCmd(&cf))
	return cmd
}

func newSandboxCreateCmd(cf *clientFlags) *cobra.Command {
	var tmpl string
	var timeout int
	var env, meta []string
	var autoPause, autoResume, filesOnly bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its ID",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			envs, err := parseKV(env)
			if err != nil {
				return err
			}
			md, err := parseKV(meta)
			if err != nil {
				return err
			}
			sb, err := cf.client().CreateSandbox(cmd.Context(), moat.CreateOptions{
				Template: tmpl, Timeout: time.Duration(timeout) * time.Second, EnvVars: envs, Metadata: md,
				AutoPause: autoPause, AutoResume: autoResume, AutoPauseFilesOnly: filesOnly})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			return nil
		},
	}
	cmd.Flags().StringVarP(&tmpl, "template", "t", moat.DefaultTemplate,
		"template ID or name, or snapshot ID or name (see 'moat sandbox snapshot')")
	cmd.Flags().IntVar(&timeout, "timeout", int(moat.DefaultTimeout/time.Second),
		"seconds until the sandbox is killed (paused with --auto-pause)")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "sandbox environment variable KEY=VALUE (repeatable)")
	cmd.Flags().StringArrayVar(&meta, "metadata", nil, "metadata KEY=VALUE (repeatable)")
	cmd.Flags().BoolVar(&autoPause, "auto-pause", false,
		"pause the sandbox instead of killing it when its timeout expires (resume with 'moat sandbox resume')")
	cmd.Flags().BoolVar(&autoResume, "auto-resume", false,
		"resume the auto-paused sandbox when traffic reaches it (requires --auto-pause)")
	cmd.Flags().BoolVar(&filesOnly, "files-only", false,
		"with --auto-pause: keep only the files, not the memory (the resume boots the sandbox again; excludes --auto-resume)")
	return cmd
}

func newSandboxListCmd(cf *clientFlags) *cobra.Command {
	var pools, asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List running sandboxes (--pool: the server's warm pools)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pools {
				return listPools(cmd, cf, asJSON)
			}
			list, err := cf.client().ListSandboxes(cmd.Context())
			if err != nil || asJSON {
				return printJSON(cmd, list, err)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTEMPLATE\tRUNTIME\tSTATE\tSTARTED\tEXPIRES\tCPU\tMEMORY")
			for _, s := range list {
				tmpl := s.TemplateID
				if s.Alias != "" {
					tmpl = s.Alias
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%dMB\n", s.ID, tmpl, s.Metadata["moat.runtime"], s.State,
					s.StartedAt.Local().Format(time.DateTime), s.EndAt.Local().Format(time.DateTime),
					s.CPUCount, s.MemoryMB)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&pools, "pool", false, "show the warm pools (moat serve --pool) instead: template, size, ready")
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// listPools prints the server's warm pools.
func listPools(cmd *cobra.Command, cf *clientFlags, asJSON bool) error {
	list, err := cf.client().ListPools(cmd.Context())
	if err != nil || asJSON {
		return printJSON(cmd, list, err)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TEMPLATE\tSIZE\tREADY")
	for _, p := range list {
		fmt.Fprintf(w, "%s\t%d\t%d\n", p.Template, p.Size, p.Ready)
	}
	return w.Flush()
}

func newSandboxExecCmd(cf *clientFlags) *cobra.Command {
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "exec ID -- CMD...",
		Short: "Run a command in a sandbox, stream its output and exit with its status",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := rf.options(cmd)
			if err != nil {
				return err
			}
			sb, err := cf.client().GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			code, err := sb.Run(cmd.Context(), shellJoin(args[1:]), opts)
			if err != nil {
				return err
			}
			return exitStatus(code)
		},
	}
	rf.register(cmd)
	return cmd
}

func newSandboxKillCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "kill ID...",
		Short: "Kill sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := cf.client()
			return forEach(cmd, args, func(id string) error { return c.Kill(cmd.Context(), id) })
		},
	}
}

// forEach calls fn for every argument, reports each failure on stderr and
// returns exitError 1 if any failed.
func forEach(cmd *cobra.Command, args []string, fn func(arg string) error) error {
	var failed error
	for _, a := range args {
		if err := fn(a); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "moat: %v\n", err)
			failed = exitError{code: 1}
		}
	}
	return failed
}

func newSandboxPauseCmd(cf *clientFlags) *cobra.Command {
	var filesOnly bool
	cmd := &cobra.Command{
		Use:   "pause ID...",
		Short: "Pause running sandboxes (memory and files are kept; resume with `moat sandbox resume`)",
		Long: "Pause running sandboxes. Their memory and files are kept and the resume continues their\n" +
			"processes; with --files-only only the files are kept (E2B's keepMemory: false): the processes\n" +
			"end, the memory is freed, and the resume boots the sandbox again from its files.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := cf.client()
			pause := c.Pause
			if filesOnly {
				pause = c.PauseFilesOnly
			}
			return forEach(cmd, args, func(id string) error { return pause(cmd.Context(), id) })
		},
	}
	cmd.Flags().BoolVar(&filesOnly, "files-only", false, "keep only the files, not the memory or the processes")
	return cmd
}

func newSandboxResumeCmd(cf *clientFlags) *cobra.Command {
	var timeout int
	cmd := &cobra.Command{
		Use:   "resume ID...",
		Short: "Resume paused sandboxes (running ones only get their timeout extended)",
		Long: "Resume paused sandboxes and make them expire --timeout seconds from now. A sandbox that\n" +
			"is already running only has its timeout extended (never shortened).\n" +
			"Prints \"ID resumed\" or \"ID already running\" per sandbox.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := cf.client()
			return forEach(cmd, args, func(id string) error {
				_, resumed, err := c.Connect(cmd.Context(), id, time.Duration(timeout)*time.Second)
				if err != nil {
					return err
				}
				state := "already running"
				if resumed {
					state = "resumed"
				}
				fmt.Fprintln(cmd.OutOrStdout(), id, state)
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&timeout, "timeout", int(moat.DefaultTimeout/time.Second), "seconds until the sandbox expires")
	return cmd
}

func newSandboxSnapshotCmd(cf *clientFlags) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a running sandbox and print the snapshot ID",
		Long: "Save a running sandbox's memory and files as a snapshot and print its ID; the sandbox\n" +
			"keeps running. Start new sandboxes from it with `moat sandbox create --template SNAPSHOT`\n" +
			"(the ID or --name). Needs the server's vm runtime.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			snap, err := cf.client().CreateSnapshot(cmd.Context(), args[0], name)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), snap.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name of the snapshot, usable instead of its ID (letters, digits, -_./:)")
	return cmd
}

func newSandboxSnapshotsCmd(cf *clientFlags) *cobra.Command {
	var sandboxID string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "snapshots",
		Short: "List snapshots, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := cf.client().ListSnapshots(cmd.Context(), sandboxID)
			if err != nil || asJSON {
				return printJSON(cmd, list, err)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tNAME\tSANDBOX\tCREATED")
			for _, s := range list {
				name, created := "-", "-"
				if len(s.Names) > 0 {
					name = strings.Join(s.Names, ",")
				}
				if !s.CreatedAt.IsZero() {
					created = s.CreatedAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.ID, name, s.SandboxID, created)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&sandboxID, "sandbox", "", "only the snapshots of this sandbox")
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newSandboxSnapshotRmCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot-rm SNAPSHOT...",
		Short: "Delete snapshots by ID or name (sandboxes started from them are not affected)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := cf.client()
			return forEach(cmd, args, func(id string) error { return c.DeleteSnapshot(cmd.Context(), id) })
		},
	}
}

func newRunCmd() *cobra.Command {
	var cf clientFlags
	var rf runFlags
	var tmpl string
	var timeout int
	cmd := &cobra.Command{
		Use:   "run [--template T] -- CMD...",
		Short: "Create a sandbox, run one command in it, kill it; exit with the command's status",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := rf.options(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sb, err := cf.client().CreateSandbox(ctx, moat.CreateOptions{
				Template: tmpl, Timeout: time.Duration(timeout) * time.Second})
			if err != nil {
				return err
			}
			defer killDetached(ctx, sb)
			code, err := sb.Run(ctx, shellJoin(args), opts)
			if err != nil {
				return err
			}
			return exitStatus(code)
		},
	}
	cf.register(cmd)
	rf.register(cmd)
	cmd.Flags().StringVarP(&tmpl, "template", "t", moat.DefaultTemplate, "template ID or name")
	cmd.Flags().IntVar(&timeout, "timeout", int(moat.DefaultTimeout/time.Second),
		"seconds the sandbox may live (the command is killed with it)")
	return cmd
}

// killDetached kills sb even when ctx was cancelled (Ctrl-C), within 30 s.
func killDetached(ctx context.Context, sb *moat.Sandbox) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := sb.Kill(ctx); err != nil {
		slog.Warn("kill sandbox", "sandbox", sb.ID, "err", err)
	}
}
