package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	moat "github.com/moatsh/moat/sdk/go"
)

// newSandboxShellCmd is `moat sandbox shell ID`: an interactive terminal
// in the sandbox (envd's PTY API), the local terminal in raw mode and its
// size followed; it exits with the shell's status.
func newSandboxShellCmd(cf *clientFlags) *cobra.Command {
	var user, command string
	cmd := &cobra.Command{
		Use:   "shell ID",
		Short: "Open an interactive shell (a terminal) in a sandbox; exit with its status",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := cf.client().GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			opts := moat.ShellOptions{Cmd: command, User: user, Stdin: cmd.InOrStdin(), Output: cmd.OutOrStdout(),
				Envs: map[string]string{"TERM": termName()}}
			if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
				restore, resize, err := localTerminal(fd)
				if err != nil {
					return err
				}
				defer restore()
				opts.Resize = resize
				if w, h, err := term.GetSize(fd); err == nil {
					opts.Size = moat.TermSize{Cols: uint32(w), Rows: uint32(h)}
				}
			}
			code, err := sb.Shell(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return exitStatus(code)
		},
	}
	cmd.Flags().StringVar(&user, "user", "", `account to run the shell as ("root" or "user"; default: the sandbox's default user)`)
	cmd.Flags().StringVar(&command, "cmd", "", "run this command on the terminal instead of an interactive bash")
	return cmd
}

// termName is the TERM the sandbox's programs see: the local one, else
// xterm-256color.
func termName() string {
	if t := os.Getenv("TERM"); t != "" && t != "dumb" {
		return t
	}
	return "xterm-256color"
}

// localTerminal puts terminal fd in raw mode and follows its size
// (SIGWINCH); restore undoes both.
func localTerminal(fd int) (restore func(), resize <-chan moat.TermSize, err error) {
	old, err := term.MakeRaw(fd)
	if err != nil {
		return nil, nil, err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGWINCH)
	sizes := make(chan moat.TermSize, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-sigs:
				if w, h, err := term.GetSize(fd); err == nil {
					select { // only the latest size matters
					case <-sizes:
					default:
					}
					sizes <- moat.TermSize{Cols: uint32(w), Rows: uint32(h)}
				}
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		_ = term.Restore(fd, old)
	}, sizes, nil
}
