package sandboxspec

import (
	"sort"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
)

// Limits execve(2) puts on the environment, so a sandbox whose envVars no
// command could start with is refused at create instead of failing every
// command with E2BIG. One "NAME=value" string may hold at most
// MAX_ARG_STRLEN (32 pages) bytes including its NUL; all of them together
// must leave room for argv and envd's own variables within the kernel's
// limit (a quarter of the stack limit, 2 MiB with the usual 8 MiB).
const (
	maxEnvEntryBytes = 32 * 4096 // MAX_ARG_STRLEN, NUL included
	maxEnvTotalBytes = 1 << 20
)

// CheckEnvVars reports the first reason envs cannot be a process
// environment: an empty name, a name with '=' or NUL, a value with NUL, an
// entry or a total over the execve limits. Names are checked in sorted
// order so the message is stable.
func CheckEnvVars(envs map[string]string) error {
	names := make([]string, 0, len(envs))
	for k := range envs {
		names = append(names, k)
	}
	sort.Strings(names)
	total := 0
	for _, k := range names {
		v := envs[k]
		switch {
		case k == "":
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "envVars: a variable name is empty")
		case strings.ContainsAny(k, "=\x00"):
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "envVars: name %q contains '=' or NUL", k)
		case strings.ContainsRune(v, 0):
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "envVars: value of %s contains NUL", k)
		}
		n := len(k) + 1 + len(v) + 1 // "k=v\0"
		if n > maxEnvEntryBytes {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "envVars: %s is %d bytes; one variable may have at most %d (execve's limit)", k, n-1, maxEnvEntryBytes-1)
		}
		total += n
	}
	if total > maxEnvTotalBytes {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "envVars: %d bytes in all; at most %d leave room to start commands", total, maxEnvTotalBytes)
	}
	return nil
}
