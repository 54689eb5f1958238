package dockerfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// Template is a Dockerfile translated into a template build request.
type Template struct {
	// From is FROM's argument after ARG expansion: an image reference, or
	// the name of a template (the caller asks the server which).
	From     string
	Steps    []Step
	StartCmd string // CMD / ENTRYPOINT, "" when the Dockerfile has neither
}

// Step is one instruction of E2B's build API. Args are as the SDK sends
// them: RUN [cmd] or [cmd, user]; COPY [src, dest, user, mode]; ENV [k, v,
// k, v, …]; WORKDIR [path]; USER [name].
type Step struct {
	Type string
	Args []string
	Line int // the Dockerfile line the step comes from (0 for the implied ones)
}

// Error is a Dockerfile that cannot be built, at Line (0 when the error
// concerns the whole file).
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("Dockerfile line %d: %s", e.Line, e.Msg)
	}
	return "Dockerfile: " + e.Msg
}

func errAt(line int, format string, args ...any) error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// MaxSize bounds the Dockerfile Parse reads.
const MaxSize = 1 << 20

// Parse reads a Dockerfile and translates it (see the package doc).
// buildArgs override ARG defaults, as `docker build --build-arg`. Every
// error is an *Error.
func Parse(r io.Reader, buildArgs map[string]string) (*Template, error) {
	src, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read Dockerfile: %w", err)
	}
	if len(src) > MaxSize {
		return nil, errAt(0, "larger than %d bytes", MaxSize)
	}
	res, err := parser.Parse(bytes.NewReader(src))
	if err != nil {
		return nil, syntaxError(err)
	}
	t := &translator{lex: shell.NewLex(res.EscapeToken), buildArgs: buildArgs, args: map[string]string{}, env: map[string]string{}}
	for _, n := range res.AST.Children {
		if err := t.node(n); err != nil {
			return nil, err
		}
	}
	return t.finish()
}

// syntaxError turns a parser error into an *Error naming its line.
func syntaxError(err error) error {
	line := 0
	var le *parser.LocationError
	if errors.As(err, &le) && len(le.Locations) > 0 && len(le.Locations[0]) > 0 {
		line = le.Locations[0][0].Start.Line
	}
	return errAt(line, "syntax error: %v", unwrapped(err))
}

// unwrapped is err's message without BuildKit's location decoration.
func unwrapped(err error) string {
	var le *parser.LocationError
	if errors.As(err, &le) && le.Unwrap() != nil {
		err = le.Unwrap()
	}
	return err.Error()
}

// translator holds the state of one translation.
type translator struct {
	lex       *shell.Lex
	buildArgs map[string]string
	metaArgs  map[string]string // ARG before FROM: for FROM only
	args      map[string]string // ARG in the stage
	argOrder  []string
	env       map[string]string // ENV so far (for expansion)
	froms     int
	userSet   bool
	workSet   bool
	out       Template
	entry     *cmdLine // ENTRYPOINT
	cmd       *cmdLine // CMD
}

// cmdLine is a CMD or ENTRYPOINT: exec form keeps its argv.
type cmdLine struct {
	argv []string
	exec bool
}

// node translates one instruction.
func (t *translator) node(n *parser.Node) error {
	line := n.StartLine
	if len(n.Heredocs) > 0 {
		return errAt(line, "%s: heredocs are not supported", strings.ToUpper(n.Value))
	}
	inst, err := instructions.ParseInstruction(n)
	if err != nil {
		return errAt(line, "%v", unwrapped(err))
	}
	if st, ok := inst.(*instructions.Stage); ok {
		return t.from(st, line)
	}
	if t.froms == 0 {
		if a, ok := inst.(*instructions.ArgCommand); ok {
			t.metaArg(a)
			return nil
		}
		return errAt(line, "%s before FROM: the first instruction must be FROM (or ARG)", strings.ToUpper(n.Value))
	}
	if c, ok := inst.(instructions.SupportsSingleWordExpansion); ok {
		if _, isRun := inst.(*instructions.RunCommand); !isRun {
			if err := c.Expand(t.expand); err != nil {
				return errAt(line, "%s: %v", strings.ToUpper(n.Value), err)
			}
		}
	}
	return t.command(inst, line)
}

// command translates an instruction of the stage.
func (t *translator) command(inst any, line int) error {
	switch c := inst.(type) {
	case *instructions.RunCommand:
		return t.run(c, line)
	case *instructions.CopyCommand:
		return t.copyCmd(c, line)
	case *instructions.AddCommand:
		return t.add(c, line)
	case *instructions.EnvCommand:
		return t.envCmd(c, line)
	case *instructions.ArgCommand:
		t.stageArgs(c)
	case *instructions.WorkdirCommand:
		if c.Path == "" {
			return errAt(line, "WORKDIR needs a path")
		}
		t.step(line, "WORKDIR", c.Path)
		t.workSet = true
	case *instructions.UserCommand:
		return t.user(c, line)
	case *instructions.CmdCommand:
		t.cmd = &cmdLine{argv: c.CmdLine, exec: !c.PrependShell}
	case *instructions.EntrypointCommand:
		t.entry = &cmdLine{argv: c.CmdLine, exec: !c.PrependShell}
	case *instructions.ExposeCommand, *instructions.VolumeCommand, *instructions.LabelCommand,
		*instructions.StopSignalCommand, *instructions.MaintainerCommand:
		// Metadata a sandbox has no use for.
	case *instructions.HealthCheckCommand:
		return errAt(line, "HEALTHCHECK is not supported (use a ready command: --ready-cmd)")
	case *instructions.OnbuildCommand:
		return errAt(line, "ONBUILD is not supported")
	case *instructions.ShellCommand:
		return errAt(line, "SHELL is not supported: RUN steps run with bash -c (sh -c without bash)")
	default:
		return errAt(line, "unsupported instruction %T", inst)
	}
	return nil
}

func (t *translator) step(line int, typ string, args ...string) {
	t.out.Steps = append(t.out.Steps, Step{Type: typ, Args: args, Line: line})
}

// from handles FROM: one stage only, its base expanded with the meta args.
func (t *translator) from(st *instructions.Stage, line int) error {
	t.froms++
	if t.froms > 1 {
		return errAt(line, "multi-stage builds are not supported (a second FROM)")
	}
	if st.Platform != "" {
		return errAt(line, "FROM --platform is not supported")
	}
	base, _, err := t.lex.ProcessWord(st.BaseName, envOf(t.metaArgs))
	if err != nil {
		return errAt(line, "FROM: %v", err)
	}
	base = strings.TrimSpace(base)
	switch {
	case base == "":
		return errAt(line, "FROM needs an image or template name")
	case strings.EqualFold(base, "scratch"):
		return errAt(line, "FROM scratch is not supported: a template needs a base system")
	}
	t.out.From = base
	// Docker's defaults, as the SDK's parser sets them.
	t.step(0, "USER", "root")
	t.step(0, "WORKDIR", "/")
	return nil
}

// finish adds the implied steps and the start command.
func (t *translator) finish() (*Template, error) {
	if t.froms == 0 {
		return nil, errAt(0, "no FROM instruction")
	}
	if !t.userSet {
		t.step(0, "USER", "user")
	}
	if !t.workSet {
		t.step(0, "WORKDIR", "/home/user")
	}
	t.out.StartCmd = startCmd(t.entry, t.cmd)
	return &t.out, nil
}

// startCmd applies Docker's rules: an exec-form ENTRYPOINT takes CMD as
// arguments, a shell-form one ignores CMD.
func startCmd(entry, cmd *cmdLine) string {
	switch {
	case entry != nil && entry.exec && cmd != nil:
		return joinCmd(entry) + " " + joinCmd(cmd)
	case entry != nil:
		return joinCmd(entry)
	case cmd != nil:
		return joinCmd(cmd)
	}
	return ""
}

func joinCmd(c *cmdLine) string {
	if !c.exec {
		return strings.Join(c.argv, " ")
	}
	return shellJoin(c.argv)
}

// shellJoin quotes argv for sh.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// shellQuote leaves plain words as they are and single-quotes the rest.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:@,+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// DefaultPath is what $PATH expands to before an ENV sets it: Docker's
// default, which Debian-based templates and most images use. The base's
// own environment is not known when the Dockerfile is translated (other
// variables of the base expand to "", as an unknown variable in Docker).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// expand substitutes $VAR and ${VAR…} with the stage's ARG and ENV values.
func (t *translator) expand(word string) (string, error) {
	vars := make(map[string]string, len(t.args)+len(t.env)+1)
	vars["PATH"] = DefaultPath
	for k, v := range t.args {
		vars[k] = v
	}
	for k, v := range t.env { // ENV wins over ARG, as in Docker
		vars[k] = v
	}
	out, _, err := t.lex.ProcessWord(word, envOf(vars))
	return out, err
}

// envOf is m as BuildKit's lexer wants it.
func envOf(m map[string]string) shell.EnvGetter {
	kv := make([]string, 0, len(m))
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return shell.EnvsFromSlice(kv)
}
