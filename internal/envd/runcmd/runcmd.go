// Package runcmd is the host's side of running one command in a sandbox
// through envd's process API and waiting for its end, as the SDKs'
// commands.run does. The orchestrator (a template's ready command, a warm
// member's warm-up), the template builder (RUN steps) and the vm
// runtime's template warm-up all need exactly this; it lives under
// internal/envd, below all of them, so that none imports another for it.
package runcmd

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
)

// Command is one command to run.
type Command struct {
	Argv  []string          // the program and its arguments; Argv[0] is required
	User  string            // the user to run as (envd's Basic auth)
	Token string            // the sandbox's envd access token, when it has one
	Env   map[string]string // added to the sandbox's environment
	Cwd   string            // "" for the user's home
	// KeepAlive, when set, asks envd for keepalive events at this
	// interval so that a long silent command's stream is not cut idle.
	KeepAlive time.Duration
	// Output, when set, gets the command's output as it comes; stream is
	// "stdout" or "stderr".
	Output func(stream string, b []byte)
}

// Exit is how a command ended.
type Exit struct {
	// Code is the exit code; -1 when a signal ended the process.
	Code int
	// Exited is false when a signal ended the process.
	Exited bool
	// Status is envd's description ("exit status 1", "signal: killed").
	Status string
}

// Run starts c through pc and waits for its end. An error means the
// command's fate is unknown or it never ran (envd unreachable, the
// process could not start, the stream broke); a command that ran and
// failed is a nil error and its Exit. ctx bounds the whole run: envd
// kills the process when the call ends.
func Run(ctx context.Context, pc processconnect.ProcessClient, c Command) (Exit, error) {
	stream, err := start(ctx, pc, c)
	if err != nil {
		return Exit{Code: -1}, err
	}
	defer stream.Close()
	started := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			started = true
		case ev.GetData() != nil && c.Output != nil:
			if b := ev.GetData().GetStdout(); b != nil {
				c.Output("stdout", b)
			} else if b := ev.GetData().GetStderr(); b != nil {
				c.Output("stderr", b)
			}
		case ev.GetEnd() != nil:
			end := ev.GetEnd()
			if !started {
				return Exit{Code: -1}, errors.New("run command: the process ended before it started")
			}
			if end.GetExitCode() == 0 && end.GetError() != "" { // waiting for it failed
				return Exit{Code: -1}, errors.New("run command: " + end.GetError())
			}
			if !end.GetExited() {
				return Exit{Code: -1, Status: end.GetStatus()}, nil
			}
			return Exit{Code: int(end.GetExitCode()), Exited: true, Status: end.GetStatus()}, nil
		}
	}
	if err := stream.Err(); err != nil {
		return Exit{Code: -1}, err
	}
	return Exit{Code: -1}, errors.New("run command: the stream ended without an end event")
}

// Start starts c through pc and returns once envd reports it started. The
// process outlives the call (envd keeps processes whose client went away)
// unless ctx ends first: envd kills a process whose call's deadline
// passes, so give ctx none. c.Output is not used.
func Start(ctx context.Context, pc processconnect.ProcessClient, c Command) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := start(ctx, pc, c)
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		if stream.Msg().GetEvent().GetStart() != nil {
			return nil
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	return errors.New("start command: the stream ended before the process started")
}

// start sends c's StartRequest.
func start(ctx context.Context, pc processconnect.ProcessClient, c Command) (*connect.ServerStreamForClient[process.StartResponse], error) {
	if len(c.Argv) == 0 {
		return nil, errors.New("run command: no program")
	}
	noStdin := false
	cfg := &process.ProcessConfig{Cmd: c.Argv[0], Args: c.Argv[1:], Envs: c.Env}
	if c.Cwd != "" {
		cwd := c.Cwd
		cfg.Cwd = &cwd
	}
	req := connect.NewRequest(&process.StartRequest{Process: cfg, Stdin: &noStdin})
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(c.User+":")))
	if c.Token != "" {
		req.Header().Set("X-Access-Token", c.Token)
	}
	if c.KeepAlive > 0 {
		req.Header().Set("Keepalive-Ping-Interval", strconv.Itoa(max(1, int(c.KeepAlive/time.Second))))
	}
	return pc.Start(ctx, req)
}
