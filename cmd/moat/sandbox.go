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
		"API key (env MOAT_API_KEY or E2B_API_KEY; create one with `moat apikey create`)")
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
	cmd.AddCommand(newSandboxCreateCmd(&cf), newSandboxListCmd(&cf), newSandboxExecCmd(&cf), newSandboxKillCmd(&cf))
	return cmd
}

func newSandboxCreateCmd(cf *clientFlags) *cobra.Command {
	var tmpl string
	var timeout int
	var env, meta []string
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
				Template: tmpl, Timeout: time.Duration(timeout) * time.Second, EnvVars: envs, Metadata: md})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			return nil
		},
	}
	cmd.Flags().StringVarP(&tmpl, "template", "t", moat.DefaultTemplate, "template ID or name")
	cmd.Flags().IntVar(&timeout, "timeout", int(moat.DefaultTimeout/time.Second), "seconds until the sandbox is killed")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "sandbox environment variable KEY=VALUE (repeatable)")
	cmd.Flags().StringArrayVar(&meta, "metadata", nil, "metadata KEY=VALUE (repeatable)")
	return cmd
}

func newSandboxListCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List running sandboxes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := cf.client().ListSandboxes(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTEMPLATE\tSTATE\tSTARTED\tEXPIRES\tCPU\tMEMORY")
			for _, s := range list {
				tmpl := s.TemplateID
				if s.Alias != "" {
					tmpl = s.Alias
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%dMB\n", s.ID, tmpl, s.State,
					s.StartedAt.Local().Format(time.DateTime), s.EndAt.Local().Format(time.DateTime),
					s.CPUCount, s.MemoryMB)
			}
			return w.Flush()
		},
	}
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
			var failed error
			for _, id := range args {
				if err := c.Kill(cmd.Context(), id); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "moat: %v\n", err)
					failed = exitError{code: 1}
				}
			}
			return failed
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
