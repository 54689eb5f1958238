package build

import (
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/store"
)

// Spec is a build request as the SDK sends it (E2B's TemplateBuildStartV2),
// converted from the wire by the server.
type Spec struct {
	FromImage    string
	FromTemplate string
	// Registry authenticates FromImage's registry (E2B's fromImageRegistry
	// of type "registry"); nil pulls anonymously.
	Registry *oci.Credentials
	Steps    []Step
	StartCmd string
	ReadyCmd string
	Force    bool // rebuild everything (the SDK's skipCache)
}

// Step is one of E2B's build instructions.
type Step struct {
	Type      string // ENV, WORKDIR, USER, RUN, COPY
	Args      []string
	FilesHash string // COPY: the hash the SDK computed and uploaded under
	Force     bool
}

// Plan is a validated Spec: the base and the configuration the steps set.
type Plan struct {
	FromImage    string
	FromTemplate string
	Registry     *oci.Credentials
	Force        bool
	Config       store.TemplateConfig // what the steps set, over the base's
	Steps        []Step               // kept for the log
	Runs         []RunStep            // the RUN steps, in order

	index int // the step being compiled
}

// RunStep is a RUN or COPY step with the configuration the steps before
// it set (over the base's at execution); both run in the build sandbox.
type RunStep struct {
	Index  int    // the step's number as the SDK counts (1-based)
	Cmd    string // RUN: run with bash -c (sh -c without bash)
	User   string // "" = the configured user
	Copy   *CopyStep
	Config store.TemplateConfig
}

// CopyStep is a COPY: the files the SDK uploaded under Hash (a tar of Src
// relative to its context directory), copied to Dest like Docker's COPY.
type CopyStep struct {
	Src, Dest string
	Mode      fs.FileMode // 0 = as archived
	Hash      string
}

var (
	filesHashRE = regexp.MustCompile(`^[a-f0-9]{64}$`)
	envNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	userRE      = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

// Compile validates s and folds its steps into a Plan. Errors are
// errdefs.ErrInvalidArgument for a malformed request (naming the step by
// index and type).
func Compile(s Spec) (Plan, error) {
	p := Plan{FromImage: strings.TrimSpace(s.FromImage), FromTemplate: strings.TrimSpace(s.FromTemplate),
		Registry: s.Registry, Force: s.Force, Steps: s.Steps}
	switch {
	case p.FromImage != "" && p.FromTemplate != "":
		return Plan{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "fromImage and fromTemplate are exclusive")
	case p.FromImage == "" && p.FromTemplate == "":
		return Plan{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "a build needs fromImage or fromTemplate")
	case p.Registry != nil && p.FromImage == "":
		return Plan{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "fromImageRegistry needs fromImage")
	}
	p.Config.StartCmd, p.Config.ReadyCmd = s.StartCmd, s.ReadyCmd
	for i, st := range s.Steps {
		p.index = i + 1
		if err := p.apply(st); err != nil {
			return Plan{}, errdefs.PublicWrap(err, "step %d (%s)", i+1, st.Type)
		}
	}
	return p, nil
}

// apply folds one step into p.Config.
func (p *Plan) apply(st Step) error {
	switch st.Type {
	case "ENV":
		if len(st.Args) == 0 || len(st.Args)%2 != 0 {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "ENV wants name/value pairs, got %d args", len(st.Args))
		}
		for i := 0; i < len(st.Args); i += 2 {
			k, v := st.Args[i], st.Args[i+1]
			if !envNameRE.MatchString(k) {
				return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid variable name %q", k)
			}
			if p.Config.Env == nil {
				p.Config.Env = map[string]string{}
			}
			p.Config.Env[k] = v
		}
	case "WORKDIR":
		if len(st.Args) != 1 || st.Args[0] == "" {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "WORKDIR wants one path")
		}
		dir := st.Args[0]
		if !path.IsAbs(dir) {
			// As Docker: relative to the previous WORKDIR.
			base := p.Config.Workdir
			if base == "" {
				base = "/home/user"
			}
			dir = path.Join(base, dir)
		}
		p.Config.Workdir = path.Clean(dir)
	case "USER":
		if len(st.Args) != 1 || !userRE.MatchString(st.Args[0]) {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "USER wants one user name")
		}
		p.Config.User = st.Args[0]
	case "RUN":
		if len(st.Args) < 1 || len(st.Args) > 2 || strings.TrimSpace(st.Args[0]) == "" {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "RUN wants a command and an optional user")
		}
		r := RunStep{Index: p.index, Cmd: st.Args[0], Config: over(store.TemplateConfig{}, p.Config)} // a copy
		if len(st.Args) == 2 && st.Args[1] != "" {
			if !userRE.MatchString(st.Args[1]) {
				return errdefs.Publicf(errdefs.ErrInvalidArgument, "RUN user %q", st.Args[1])
			}
			r.User = st.Args[1]
		}
		p.Runs = append(p.Runs, r)
	case "COPY":
		// args: src, dest, user ("" = the configured one), mode (octal, "" = as archived)
		if len(st.Args) < 2 || len(st.Args) > 4 || st.Args[0] == "" || st.Args[1] == "" {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "COPY wants src, dest and optional user and mode")
		}
		src := path.Clean(st.Args[0])
		if path.IsAbs(src) || src == ".." || strings.HasPrefix(src, "../") {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "COPY source %q must be inside the build context", st.Args[0])
		}
		if !filesHashRE.MatchString(st.FilesHash) {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "COPY needs the filesHash of its uploaded files")
		}
		c := &CopyStep{Src: src, Dest: st.Args[1], Hash: st.FilesHash}
		r := RunStep{Index: p.index, Copy: c, Config: over(store.TemplateConfig{}, p.Config)}
		if len(st.Args) > 2 && st.Args[2] != "" {
			if !userRE.MatchString(st.Args[2]) {
				return errdefs.Publicf(errdefs.ErrInvalidArgument, "COPY user %q", st.Args[2])
			}
			r.User = st.Args[2]
		}
		if len(st.Args) > 3 && st.Args[3] != "" {
			m, err := strconv.ParseUint(st.Args[3], 8, 32)
			if err != nil || m > 0o7777 {
				return errdefs.Publicf(errdefs.ErrInvalidArgument, "COPY mode %q: want octal permissions", st.Args[3])
			}
			c.Mode = fs.FileMode(m)
		}
		p.Runs = append(p.Runs, r)
	default:
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "unknown step type %q (want ENV, WORKDIR, USER, RUN or COPY)", st.Type)
	}
	return nil
}

// over returns base with c's settings on top (c's env wins per name).
func over(base, c store.TemplateConfig) store.TemplateConfig {
	out := base
	if len(c.Env) > 0 {
		out.Env = make(map[string]string, len(base.Env)+len(c.Env))
		for k, v := range base.Env {
			out.Env[k] = v
		}
		for k, v := range c.Env {
			out.Env[k] = v
		}
	}
	if c.Workdir != "" {
		out.Workdir = c.Workdir
	}
	if c.User != "" {
		out.User = c.User
	}
	if c.StartCmd != "" {
		out.StartCmd = c.StartCmd
	}
	if c.ReadyCmd != "" {
		out.ReadyCmd = c.ReadyCmd
	}
	return out
}
