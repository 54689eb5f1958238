package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	moat "github.com/moatsh/moat/sdk/go"
)

type commandIn struct {
	SandboxID      string            `json:"sandbox_id" jsonschema:"the sandbox's ID"`
	Command        string            `json:"command" jsonschema:"shell command line, run with bash -l -c"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory (default: the user's home)"`
	User           string            `json:"user,omitempty" jsonschema:"account to run as (default: the sandbox's default user)"`
	Envs           map[string]string `json:"envs,omitempty" jsonschema:"extra environment variables"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"seconds after which the command is killed (default 60, at most the server's call timeout)"`
}

type commandOut struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

type codeIn struct {
	SandboxID      string            `json:"sandbox_id" jsonschema:"the sandbox's ID (created from a code-interpreter template, e.g. code-interpreter-v1)"`
	Code           string            `json:"code" jsonschema:"the code to run; state (variables, imports) persists between calls in the same sandbox and language"`
	Language       string            `json:"language,omitempty" jsonschema:"python (default), javascript or typescript, r, or bash (the kernels the template has)"`
	Envs           map[string]string `json:"envs,omitempty" jsonschema:"environment variables for this execution"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"seconds after which the execution is abandoned (default 60, at most the server's call timeout)"`
}

func (s *server) addExecTools(ms *mcp.Server) {
	yes := true
	addTool(s, ms, &mcp.Tool{Name: "run_command", Title: "Run a shell command",
		Description: "Run a shell command in a sandbox and return its exit code, stdout and stderr (each truncated " +
			"beyond the server's output limit). The command is killed when its timeout passes.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes}}, s.runCommand)
	addTool(s, ms, &mcp.Tool{Name: "run_code", Title: "Run code in a Jupyter kernel",
		Description: "Run code in the sandbox's code interpreter (a Jupyter kernel; the sandbox must come from a " +
			"code-interpreter template such as code-interpreter-v1). Returns stdout, stderr, the results " +
			"(the last expression's value; matplotlib charts as PNG images) and the error with its traceback.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes}}, s.runCode)
}

func (s *server) runCommand(ctx context.Context, in commandIn) (*mcp.CallToolResult, commandOut, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, commandOut{}, errors.New("command is required")
	}
	sb, err := s.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, commandOut{}, err
	}
	timeout := s.boundedTimeout(in.TimeoutSeconds, DefaultRunTimeout)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdout, stderr := newCapped(s.cfg.MaxOutput), newCapped(s.cfg.MaxOutput)
	code, err := sb.Run(rctx, in.Command, moat.RunOptions{Stdout: stdout, Stderr: stderr, Envs: in.Envs, Cwd: in.Cwd, User: in.User})
	out := commandOut{ExitCode: code, Stdout: stdout.String(), Stderr: stderr.String()}
	if err != nil {
		// Connect sends rctx's deadline to envd, which may end the stream
		// with deadline_exceeded a moment before rctx itself expires: that
		// is this call's timeout too.
		if rctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			return nil, commandOut{}, err
		}
		// The structured output is left out of an error result: the
		// text carries what the command printed before it was killed.
		return errorResult(joinNonEmpty(fmt.Sprintf("Command timed out after %s and was killed.", timeout),
			section("stdout", out.Stdout), section("stderr", out.Stderr))), commandOut{}, nil
	}
	summary := fmt.Sprintf("Exit code %d.", code)
	if code < 0 {
		summary = "Killed by a signal (exit code -1)."
	}
	return textResult(joinNonEmpty(summary, section("stdout", out.Stdout), section("stderr", out.Stderr))), out, nil
}

// section labels a non-empty output.
func section(name, body string) string {
	if body == "" {
		return ""
	}
	return name + ":\n" + body
}

func (s *server) runCode(ctx context.Context, in codeIn) (*mcp.CallToolResult, any, error) {
	if in.Code == "" {
		return nil, nil, errors.New("code is required")
	}
	sb, err := s.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	timeout := s.boundedTimeout(in.TimeoutSeconds, DefaultRunTimeout)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ex, err := execute(rctx, s.httpClient(), s.sandboxURL(), sb, executeRequest{Code: in.Code, Language: in.Language, EnvVars: in.Envs},
		s.cfg.MaxOutput)
	if err != nil && !ex.started {
		return nil, nil, err
	}
	res := ex.result(s.cfg.MaxOutput)
	if err != nil {
		res.IsError = true
		note := err.Error()
		if rctx.Err() == context.DeadlineExceeded {
			note = fmt.Sprintf("Execution timed out after %s (the output so far is above).", timeout.Round(time.Millisecond))
		}
		res.Content = append(res.Content, &mcp.TextContent{Text: note})
	}
	return res, nil, nil
}
