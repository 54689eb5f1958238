package envdcall

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/envd/runcmd"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errconnect"
	"github.com/moatsh/moat/internal/store"
)

// StartReadyTimeout bounds how long a create waits for a template's ready
// command to exit 0 after its start command was started.
const StartReadyTimeout = 2 * time.Minute

// readyInterval is the pause between two runs of a ready command.
const readyInterval = time.Second

// runTimeout bounds one run of a ready or warm-up command.
const runTimeout = 30 * time.Second

// StartTemplateCmd runs the template's start command in the background
// through envd (as the template's user, in its workdir, with the
// sandbox's env from /init) and then its ready command until one run
// exits 0 (E2B's setStartCmd / setReadyCmd). Without either it returns at
// once. The start command outlives this call: envd keeps processes whose
// client went away. tc is the template's build config, rootfs its root
// filesystem (to find a shell).
func (c *Client) StartTemplateCmd(ctx context.Context, addr netip.Addr, sb store.Sandbox, tc store.TemplateConfig, rootfs string) error {
	if tc.StartCmd == "" && tc.ReadyCmd == "" {
		return nil
	}
	shell, args := "/bin/bash", []string{"-l", "-c"}
	if rootfs != "" {
		if _, err := os.Stat(filepath.Join(rootfs, "bin", "bash")); err != nil {
			shell, args = "/bin/sh", []string{"-c"} // images without bash
		}
	}
	pc := processconnect.NewProcessClient(c.HTTP, c.URL(addr), connect.WithProtoJSON())
	user := tc.User
	if user == "" {
		user = "user"
	}
	token := ""
	if sb.Secure {
		token = sb.EnvdAccessToken
	}
	command := func(cmd string) runcmd.Command {
		return runcmd.Command{Argv: append(append([]string{shell}, args...), cmd), User: user, Token: token, Cwd: tc.Workdir}
	}
	if tc.StartCmd != "" {
		// No deadline on this call: envd would kill the process at it.
		if err := runcmd.Start(context.WithoutCancel(ctx), pc, command(tc.StartCmd)); err != nil {
			return fmt.Errorf("template start command: %w", FromEnvd(errconnect.ToNative(err)))
		}
	}
	if tc.ReadyCmd == "" {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, StartReadyTimeout)
	defer cancel()
	last := "never ran"
	for {
		code, err := runOnce(rctx, pc, command(tc.ReadyCmd))
		switch {
		case err == nil && code == 0:
			return nil
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("exit code %d", code)
		}
		select {
		case <-rctx.Done():
			return fmt.Errorf("template ready command did not succeed within %s (last: %s): %w",
				StartReadyTimeout, last, errdefs.ErrUnavailable)
		case <-time.After(readyInterval):
		}
	}
}

// runOnce runs one command to its end, within runTimeout, and returns its
// exit code; a signal is an error.
func runOnce(ctx context.Context, pc processconnect.ProcessClient, c runcmd.Command) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	exit, err := runcmd.Run(ctx, pc, c)
	if err == nil && !exit.Exited {
		err = fmt.Errorf("ended by a signal (%s)", exit.Status)
	}
	return exit.Code, err
}

// WarmUp runs one command through envd the way the SDKs do (`bash -l -c`
// as user), so that a warm sandbox's first command after the hand-out
// does not pay for the guest's first process start (slow in a freshly
// restored microVM under TCG: its pages fault in one by one). A failure
// (say, an image without bash) only costs that time later.
func (c *Client) WarmUp(ctx context.Context, addr netip.Addr, user string) error {
	return c.runZero(ctx, addr, "warm-up command", runcmd.Command{Argv: []string{"/bin/bash", "-l", "-c", "true"}, User: user})
}

// Sync runs sync(1) as root through envd, with the sandbox's token, so
// that what its processes wrote is on its disk before a filesystem-only
// pause stops them (a microVM's page cache goes with its memory).
func (c *Client) Sync(ctx context.Context, addr netip.Addr, token string) error {
	return c.runZero(ctx, addr, "sync", runcmd.Command{Argv: []string{"sync"}, User: "root", Token: token})
}

// runZero runs cmd once through the envd at addr (runOnce); an exit code
// other than 0 is an error naming what.
func (c *Client) runZero(ctx context.Context, addr netip.Addr, what string, cmd runcmd.Command) error {
	pc := processconnect.NewProcessClient(c.HTTP, c.URL(addr), connect.WithProtoJSON())
	code, err := runOnce(ctx, pc, cmd)
	if err == nil && code != 0 {
		err = fmt.Errorf("%s: exit code %d", what, code)
	}
	return err
}
