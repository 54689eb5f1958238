package orchestrator

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// StartReadyTimeout bounds how long a create waits for a template's ready
// command to exit 0 after its start command was started.
const StartReadyTimeout = 2 * time.Minute

// readyInterval is the pause between two runs of a ready command.
const readyInterval = time.Second

// startTemplateCmd runs the template's start command in the background
// through envd (as the template's user, in its workdir, with the
// sandbox's env from /init) and then its ready command until one run
// exits 0 (E2B's setStartCmd / setReadyCmd). Without either it returns at
// once. The start command outlives this call: envd keeps processes whose
// client went away. tc is the template's build config, rootfs its root
// filesystem (to find a shell).
func (o *Orchestrator) startTemplateCmd(ctx context.Context, addr netip.Addr, sb store.Sandbox, tc store.TemplateConfig, rootfs string) error {
	if tc.StartCmd == "" && tc.ReadyCmd == "" {
		return nil
	}
	shell, args := "/bin/bash", []string{"-l", "-c"}
	if rootfs != "" {
		if _, err := os.Stat(filepath.Join(rootfs, "bin", "bash")); err != nil {
			shell, args = "/bin/sh", []string{"-c"} // images without bash
		}
	}
	pc := processconnect.NewProcessClient(o.http, o.envdURL(addr), connect.WithProtoJSON())
	user := tc.User
	if user == "" {
		user = "user"
	}
	cfg := func(cmd string) *process.StartRequest {
		noStdin := false
		c := &process.ProcessConfig{Cmd: shell, Args: append(append([]string(nil), args...), cmd)}
		if tc.Workdir != "" {
			wd := tc.Workdir
			c.Cwd = &wd
		}
		return &process.StartRequest{Process: c, Stdin: &noStdin}
	}
	headers := func(h interface{ Set(string, string) }) {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
		if sb.Secure {
			h.Set("X-Access-Token", sb.EnvdAccessToken)
		}
	}
	if tc.StartCmd != "" {
		// No deadline on this call: envd would kill the process at it.
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		req := connect.NewRequest(cfg(tc.StartCmd))
		headers(req.Header())
		stream, err := pc.Start(sctx, req)
		if err == nil {
			for stream.Receive() {
				if stream.Msg().GetEvent().GetStart() != nil {
					break
				}
			}
			err = stream.Err()
			stream.Close()
		}
		cancel()
		if err != nil {
			return fmt.Errorf("template start command: %v: %w", err, errdefs.ErrUnavailable)
		}
	}
	if tc.ReadyCmd == "" {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, StartReadyTimeout)
	defer cancel()
	last := "never ran"
	for {
		code, err := o.runOnce(rctx, pc, cfg(tc.ReadyCmd), headers)
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

// runOnce runs one command to its end and returns its exit code.
func (o *Orchestrator) runOnce(ctx context.Context, pc processconnect.ProcessClient, in *process.StartRequest,
	headers func(interface{ Set(string, string) })) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := connect.NewRequest(in)
	headers(req.Header())
	stream, err := pc.Start(ctx, req)
	if err != nil {
		return -1, err
	}
	defer stream.Close()
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil {
			if !end.GetExited() {
				return -1, errors.New("killed by a signal")
			}
			return int(end.GetExitCode()), nil
		}
	}
	if err := stream.Err(); err != nil {
		return -1, err
	}
	return -1, errors.New("no end event")
}
