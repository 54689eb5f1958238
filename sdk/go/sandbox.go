package moat

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
)

// EnvdPort is the port of envd inside every sandbox.
const EnvdPort = 49983

// SandboxInfo describes a sandbox as the API lists it. Fields the answer did
// not carry are zero (CreateSandbox answers only IDs and the envd version).
type SandboxInfo struct {
	ID          string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"` // template name
	EnvdVersion string            `json:"envdVersion,omitempty"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`           // when the sandbox expires
	State       string            `json:"state,omitempty"` // "running" or "paused"
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// Sandbox is a handle on one sandbox, from CreateSandbox or GetSandbox.
type Sandbox struct {
	ID          string
	Info        SandboxInfo
	AccessToken string // envd access token (X-Access-Token); "" if none

	client *Client
}

// Kill destroys the sandbox; see Client.Kill.
func (s *Sandbox) Kill(ctx context.Context) error {
	return s.client.Kill(ctx, s.ID)
}

// Pause suspends the sandbox; see Client.Pause. s.Info.State becomes
// "paused" on success.
func (s *Sandbox) Pause(ctx context.Context) error {
	if err := s.client.Pause(ctx, s.ID); err != nil {
		return err
	}
	s.Info.State = "paused"
	return nil
}

// PauseFilesOnly pauses the sandbox keeping only its files; see
// Client.PauseFilesOnly. s.Info.State becomes "paused" on success.
func (s *Sandbox) PauseFilesOnly(ctx context.Context) error {
	if err := s.client.PauseFilesOnly(ctx, s.ID); err != nil {
		return err
	}
	s.Info.State = "paused"
	return nil
}

// Connect resumes the sandbox if it is paused and makes it expire no sooner
// than timeout from now; see Client.Connect. It reports whether the sandbox was resumed
// and refreshes s.AccessToken and the Info fields the answer carries
// (s.Info.State becomes "running"). Not safe for concurrent use with other
// calls on s.
func (s *Sandbox) Connect(ctx context.Context, timeout time.Duration) (resumed bool, err error) {
	fresh, resumed, err := s.client.Connect(ctx, s.ID, timeout)
	if err != nil {
		return false, err
	}
	if fresh.AccessToken != "" {
		s.AccessToken = fresh.AccessToken
	}
	if fresh.Info.TemplateID != "" {
		s.Info.TemplateID = fresh.Info.TemplateID
	}
	if fresh.Info.Alias != "" {
		s.Info.Alias = fresh.Info.Alias
	}
	if fresh.Info.EnvdVersion != "" {
		s.Info.EnvdVersion = fresh.Info.EnvdVersion
	}
	s.Info.State = fresh.Info.State
	return resumed, nil
}

// CreateSnapshot snapshots the sandbox, which keeps running; see
// Client.CreateSnapshot.
func (s *Sandbox) CreateSnapshot(ctx context.Context, name string) (SnapshotInfo, error) {
	return s.client.CreateSnapshot(ctx, s.ID, name)
}

// RunOptions configure one command.
type RunOptions struct {
	Stdout io.Writer         // receives the command's stdout; nil discards it
	Stderr io.Writer         // receives the command's stderr; nil discards it
	Envs   map[string]string // extra environment variables
	Cwd    string            // working directory; "" = the user's home
	User   string            // account to run as; "" = envd's default
}

// Run runs cmd with /bin/bash -l -c inside the sandbox, streams its output
// to opts.Stdout/opts.Stderr and waits for it to end. It returns the exit
// code (-1 when the process was killed by a signal) with a nil error
// whenever the command ran, whatever its status; the error is for failures
// to start or follow it. A ctx deadline is also the process's lifetime:
// envd kills the command when it passes.
func (s *Sandbox) Run(ctx context.Context, cmd string, opts RunOptions) (int, error) {
	pc := processconnect.NewProcessClient(s.client.httpClient(), s.client.sandboxURL(), connect.WithProtoJSON())
	noStdin := false
	cfg := &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}, Envs: opts.Envs}
	if opts.Cwd != "" {
		cfg.Cwd = &opts.Cwd
	}
	req := connect.NewRequest(&process.StartRequest{Process: cfg, Stdin: &noStdin})
	s.setEnvdHeaders(req.Header(), opts.User)
	req.Header().Set("Keepalive-Ping-Interval", "50")

	stream, err := pc.Start(ctx, req)
	if err != nil {
		return -1, fromConnect("run: start", err)
	}
	defer stream.Close()
	return consume(stream, opts)
}

// eventStream is the part of a server stream consume reads.
type eventStream interface {
	Receive() bool
	Msg() *process.StartResponse
	Err() error
}

// consume reads process events until the end event.
func consume(stream eventStream, opts RunOptions) (int, error) {
	stdout, stderr := orDiscard(opts.Stdout), orDiscard(opts.Stderr)
	started := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			started = true
		case ev.GetData() != nil:
			d := ev.GetData()
			var err error
			if b := d.GetStdout(); b != nil {
				_, err = stdout.Write(b)
			} else if b := d.GetStderr(); b != nil {
				_, err = stderr.Write(b)
			} else if b := d.GetPty(); b != nil {
				_, err = stdout.Write(b)
			}
			if err != nil {
				return -1, fmt.Errorf("run: write output: %w", err)
			}
		case ev.GetEnd() != nil:
			if !started {
				return -1, fmt.Errorf("run: end event before start: %w", ErrInternal)
			}
			return int(ev.GetEnd().GetExitCode()), nil
		}
	}
	if err := stream.Err(); err != nil {
		return -1, fromConnect("run", err)
	}
	return -1, fmt.Errorf("run: stream ended without an end event: %w", errors.Join(ErrUnavailable, io.ErrUnexpectedEOF))
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// headerSetter is http.Header's Set, for testing without a request.
type headerSetter interface{ Set(key, value string) }

// setEnvdHeaders adds what the sandbox proxy and envd need on every call.
func (s *Sandbox) setEnvdHeaders(h headerSetter, user string) {
	h.Set("E2b-Sandbox-Id", s.ID)
	h.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	if s.AccessToken != "" {
		h.Set("X-Access-Token", s.AccessToken)
	}
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}
