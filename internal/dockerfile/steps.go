package dockerfile

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
)

var (
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// userRE is what the build API accepts as a user name.
	userRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

// addStage is where ADD puts a local archive before unpacking it.
const addStage = "/tmp/.moat-add"

// metaArg records an ARG before FROM (visible to FROM, and to a stage ARG
// of the same name without a default).
func (t *translator) metaArg(a *instructions.ArgCommand) {
	if t.metaArgs == nil {
		t.metaArgs = map[string]string{}
	}
	for _, kv := range a.Args {
		if v, ok := t.buildArgs[kv.Key]; ok {
			t.metaArgs[kv.Key] = v
			continue
		}
		if kv.Value != nil {
			v, _, err := t.lex.ProcessWord(*kv.Value, envOf(t.metaArgs))
			if err != nil {
				v = *kv.Value
			}
			t.metaArgs[kv.Key] = v
		}
	}
}

// stageArgs records ARGs of the stage (their defaults already expanded).
func (t *translator) stageArgs(a *instructions.ArgCommand) {
	for _, kv := range a.Args {
		v, ok := t.buildArgs[kv.Key]
		if !ok && kv.Value != nil {
			v, ok = *kv.Value, true
		}
		if !ok {
			v, ok = t.metaArgs[kv.Key]
		}
		if !ok {
			continue
		}
		if _, seen := t.args[kv.Key]; !seen {
			t.argOrder = append(t.argOrder, kv.Key)
		}
		t.args[kv.Key] = v
	}
}

// run translates RUN; the stage's ARGs are exported in front of the
// command (Docker puts them in RUN's environment, not the image's).
func (t *translator) run(c *instructions.RunCommand, line int) error {
	if len(c.FlagsUsed) > 0 {
		return errAt(line, "RUN --%s is not supported", c.FlagsUsed[0])
	}
	if len(c.Files) > 0 {
		return errAt(line, "RUN: heredocs are not supported")
	}
	var cmd string
	if c.PrependShell {
		cmd = strings.Join(c.CmdLine, " ")
	} else {
		cmd = shellJoin(c.CmdLine)
	}
	if strings.TrimSpace(cmd) == "" {
		return errAt(line, "RUN needs a command")
	}
	var exports []string
	for _, k := range t.argOrder {
		if _, shadowed := t.env[k]; !shadowed {
			exports = append(exports, k+"="+shellQuote(t.args[k]))
		}
	}
	if len(exports) > 0 {
		cmd = "export " + strings.Join(exports, " ") + "; " + cmd
	}
	t.step(line, "RUN", cmd)
	return nil
}

// envCmd translates ENV.
func (t *translator) envCmd(c *instructions.EnvCommand, line int) error {
	args := make([]string, 0, 2*len(c.Env))
	for _, kv := range c.Env {
		if !envNameRE.MatchString(kv.Key) {
			return errAt(line, "ENV: invalid variable name %q", kv.Key)
		}
		args = append(args, kv.Key, kv.Value)
		t.env[kv.Key] = kv.Value
	}
	if len(args) == 0 {
		return errAt(line, "ENV needs name=value")
	}
	t.step(line, "ENV", args...)
	return nil
}

// user translates USER: a user name (the build API runs steps as a named
// user; uids and groups are refused rather than guessed).
func (t *translator) user(c *instructions.UserCommand, line int) error {
	name := c.User
	if strings.Contains(name, ":") {
		return errAt(line, "USER %s: a group is not supported (steps run with the user's primary group)", name)
	}
	if !userRE.MatchString(name) {
		return errAt(line, "USER %q: want a user name (lower-case letters, digits, '_', '-'; numeric IDs are not supported)", name)
	}
	t.step(line, "USER", name)
	t.userSet = true
	return nil
}

// copyCmd translates COPY: one COPY step per source.
func (t *translator) copyCmd(c *instructions.CopyCommand, line int) error {
	switch {
	case c.From != "":
		return errAt(line, "COPY --from=%s is not supported (multi-stage builds and images as sources)", c.From)
	case c.Parents:
		return errAt(line, "COPY --parents is not supported")
	case len(c.ExcludePatterns) > 0:
		return errAt(line, "COPY --exclude is not supported")
	}
	return t.copies(c.SourcesAndDest, c.Chown, c.Chmod, line, "COPY")
}

// add translates ADD of local files; a local tar archive is copied and
// then unpacked by a RUN, as Docker unpacks it.
func (t *translator) add(c *instructions.AddCommand, line int) error {
	switch {
	case c.Checksum != "":
		return errAt(line, "ADD --checksum is not supported (no remote sources)")
	case c.KeepGitDir != nil:
		return errAt(line, "ADD --keep-git-dir is not supported (no git sources)")
	case c.Unpack != nil:
		return errAt(line, "ADD --unpack is not supported")
	case len(c.ExcludePatterns) > 0:
		return errAt(line, "ADD --exclude is not supported")
	}
	for _, s := range c.SourcePaths {
		if isRemote(s) {
			return errAt(line, "ADD %s: remote sources (URLs, git) are not supported; download in a RUN step instead", s)
		}
	}
	var plain []string
	for _, s := range c.SourcePaths {
		if !isArchive(s) {
			plain = append(plain, s)
			continue
		}
		if err := t.addArchive(s, c.DestPath, line); err != nil {
			return err
		}
	}
	if len(plain) == 0 {
		return nil
	}
	sd := instructions.SourcesAndDest{DestPath: c.DestPath, SourcePaths: plain, SourceContents: c.SourceContents}
	if len(plain) < len(c.SourcePaths) && !strings.HasSuffix(sd.DestPath, "/") {
		sd.DestPath += "/"
	}
	return t.copies(sd, c.Chown, c.Chmod, line, "ADD")
}

// addArchive is ADD of a local tar archive: COPY to a staging dir, then
// unpack into dest as root.
func (t *translator) addArchive(src, dest string, line int) error {
	s, err := cleanSource(src)
	if err != nil {
		return errAt(line, "ADD %s", err)
	}
	staged := addStage + "/" + path.Base(s)
	t.step(line, "COPY", s, staged, "root", "")
	t.step(line, "RUN", "mkdir -p "+shellQuote(dest)+" && tar -xf "+shellQuote(staged)+" -C "+shellQuote(dest)+
		" && rm -rf "+addStage, "root")
	return nil
}

// copies emits one COPY step per source.
func (t *translator) copies(sd instructions.SourcesAndDest, chown, chmod string, line int, kw string) error {
	if len(sd.SourceContents) > 0 {
		return errAt(line, "%s: heredocs are not supported", kw)
	}
	if len(sd.SourcePaths) == 0 || sd.DestPath == "" {
		return errAt(line, "%s needs a source and a destination", kw)
	}
	if len(sd.SourcePaths) > 1 && !strings.HasSuffix(sd.DestPath, "/") {
		return errAt(line, "%s with more than one source needs a destination directory ending in /", kw)
	}
	owner, err := chownUser(chown)
	if err != nil {
		return errAt(line, "%s %v", kw, err)
	}
	mode, err := chmodOctal(chmod)
	if err != nil {
		return errAt(line, "%s %v", kw, err)
	}
	for _, s := range sd.SourcePaths {
		src, err := cleanSource(s)
		if err != nil {
			return errAt(line, "%s %v", kw, err)
		}
		t.step(line, "COPY", src, sd.DestPath, owner, mode)
	}
	return nil
}

// cleanSource makes a source path relative to the context directory, as
// Docker reads it ("/a" is the context's a), and refuses escapes.
func cleanSource(s string) (string, error) {
	if s == "" {
		return "", errSource(s, "is empty")
	}
	if c := path.Clean(s); !path.IsAbs(s) && (c == ".." || strings.HasPrefix(c, "../")) {
		return "", errSource(s, "is outside the build context")
	}
	c := strings.TrimPrefix(path.Clean("/"+s), "/")
	if c == "" {
		c = "."
	}
	return c, nil
}

type sourceError struct{ src, why string }

func (e *sourceError) Error() string { return "source " + strconv.Quote(e.src) + " " + e.why }

func errSource(s, why string) error { return &sourceError{s, why} }

// chownUser is --chown's user (no group, no numeric ID: see user).
func chownUser(chown string) (string, error) {
	if chown == "" {
		return "", nil
	}
	u, g, hasGroup := strings.Cut(chown, ":")
	if hasGroup && g != u {
		return "", errSource(chown, "(--chown): a group is not supported (files get the user's primary group)")
	}
	if !userRE.MatchString(u) {
		return "", errSource(chown, "(--chown): want a user name; numeric IDs are not supported")
	}
	return u, nil
}

// chmodOctal is --chmod as the 4-digit octal mode the build API wants.
func chmodOctal(chmod string) (string, error) {
	if chmod == "" {
		return "", nil
	}
	m, err := strconv.ParseUint(chmod, 8, 32)
	if err != nil || m > 0o7777 {
		return "", errSource(chmod, "(--chmod): want octal permissions such as 0644")
	}
	return fmt.Sprintf("%04o", m), nil
}

// isRemote reports whether an ADD source is a URL or a git repository.
func isRemote(s string) bool {
	return strings.Contains(s, "://") || strings.HasPrefix(s, "git@")
}

// isArchive reports whether an ADD source names a tar archive (by name:
// the CLI sends the file as it is, so Docker's sniffing is not needed).
func isArchive(s string) bool {
	if strings.ContainsAny(s, "*?[") {
		return false
	}
	for _, ext := range []string{".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz"} {
		if strings.HasSuffix(strings.ToLower(s), ext) {
			return true
		}
	}
	return false
}
