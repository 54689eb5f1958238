package interpreter

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/jupyter"
)

//go:embed startup.py
var pythonStartup string

// language describes how to run one code-interpreter language.
type language struct {
	name string
	// spec returns the kernelspec, or an error if the runtime is missing.
	// nil means the language uses the built-in bash runner.
	spec func(cfg Config) (jupyter.Spec, error)
	// startup is executed silently after every kernel start.
	startup string
	// firstRun is executed silently before a kernel's first execution:
	// a kernel started before a template snapshot wakes up in every clone
	// with the same state, its random module's seed included.
	firstRun string
	// setEnv returns code that saves the current values of env's keys and
	// sets env; restoreEnv returns code that reverts the last setEnv.
	setEnv     func(env map[string]string) string
	restoreEnv func(keys []string) string
}

// denoLateResultGrace: Deno's kernel sometimes publishes execute_result
// after reporting idle (a missing JS result in roughly one run in ten).
const denoLateResultGrace = 300 * time.Millisecond

// languages is the launch table, keyed by normalised language name.
var languages = map[string]language{
	"python": {
		name:       "python",
		spec:       func(cfg Config) (jupyter.Spec, error) { return checked(jupyter.PythonSpec(cfg.Python)) },
		startup:    pythonStartup,
		firstRun:   "import random as _moat_random\n_moat_random.seed()\ndel _moat_random",
		setEnv:     pythonSetEnv,
		restoreEnv: pythonRestoreEnv,
	},
	"javascript": {
		name: "javascript",
		spec: func(Config) (jupyter.Spec, error) {
			s, err := findOr("deno", jupyter.Spec{Name: "deno", Language: "typescript",
				Argv: []string{"deno", "jupyter", "--kernel", "--conn", "{connection_file}"}})
			s.LateResultGrace = denoLateResultGrace
			return s, err
		},
		setEnv: func(env map[string]string) string {
			return fmt.Sprintf(`globalThis.__moatEnv = {}; for (const [k, v] of Object.entries(JSON.parse(atob(%q)))) { globalThis.__moatEnv[k] = Deno.env.get(k); Deno.env.set(k, v); }`, b64JSON(env))
		},
		restoreEnv: func([]string) string {
			return `for (const [k, v] of Object.entries(globalThis.__moatEnv ?? {})) { if (v === undefined) Deno.env.delete(k); else Deno.env.set(k, v); }`
		},
	},
	"r": {
		name: "r",
		spec: func(Config) (jupyter.Spec, error) {
			return findOr("ir", jupyter.Spec{Name: "ir", Language: "R",
				Argv: []string{"R", "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"}})
		},
		setEnv: func(env map[string]string) string {
			var b strings.Builder
			b.WriteString(".moat_env <- Sys.getenv(c(")
			for i, k := range sortedKeys(env) {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%q", k)
			}
			b.WriteString("), unset = NA); Sys.setenv(")
			for i, k := range sortedKeys(env) {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%q = %q", k, env[k])
			}
			b.WriteString(")")
			return b.String()
		},
		restoreEnv: func([]string) string {
			return `for (k in names(.moat_env)) { if (is.na(.moat_env[[k]])) Sys.unsetenv(k) else do.call(Sys.setenv, setNames(list(.moat_env[[k]]), k)) }`
		},
	},
	"bash": {
		name:       "bash",
		setEnv:     bashSetEnv,
		restoreEnv: bashRestoreEnv,
	},
}

// normalizeLanguage lower-cases and trims; js/ts alias javascript (which
// also runs typescript); empty means python.
func normalizeLanguage(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "", "python3":
		return "python"
	case "js", "ts", "typescript", "deno":
		return "javascript"
	case "sh":
		return "bash"
	}
	return s
}

// publicLanguage is the language name reported to clients for a request.
func publicLanguage(raw string) string {
	s := strings.ToLower(strings.TrimSpace(raw))
	switch s {
	case "", "python3":
		return "python"
	case "js":
		return "javascript"
	case "ts":
		return "typescript"
	}
	return s
}

func checked(s jupyter.Spec) (jupyter.Spec, error) {
	if err := s.LookPath(); err != nil {
		return s, fmt.Errorf("language runtime not installed: %w", err)
	}
	return s, nil
}

// findOr prefers an installed kernelspec, else the built-in argv.
func findOr(name string, builtin jupyter.Spec) (jupyter.Spec, error) {
	if s, err := jupyter.FindSpec(name, nil); err == nil {
		return checked(s)
	}
	if _, err := exec.LookPath(builtin.Argv[0]); err != nil {
		return builtin, fmt.Errorf("language runtime not installed: %w", err)
	}
	return builtin, nil
}

func b64JSON(v any) string {
	b, _ := json.Marshal(v)
	return base64.StdEncoding.EncodeToString(b)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func pythonSetEnv(env map[string]string) string {
	return fmt.Sprintf(`import os as _moat_os, json as _moat_json, base64 as _moat_b64
_moat_new = _moat_json.loads(_moat_b64.b64decode(%q))
_moat_saved_env = {k: _moat_os.environ.get(k) for k in _moat_new}
_moat_os.environ.update(_moat_new)
del _moat_new`, b64JSON(env))
}

func pythonRestoreEnv([]string) string {
	return `for _k, _v in globals().pop("_moat_saved_env", {}).items():
    if _v is None:
        _moat_os.environ.pop(_k, None)
    else:
        _moat_os.environ[_k] = _v`
}

// shellQuote single-quotes s for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func bashSetEnv(env map[string]string) string {
	var b strings.Builder
	b.WriteString("__moat_saved=()\n")
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&b, "if [ -n \"${%[1]s+x}\" ]; then __moat_saved+=(%[1]s=%[2]s\"${%[1]s}\"); else __moat_saved+=(%[1]s); fi\nexport %[1]s=%[3]s\n",
			k, "=", shellQuote(env[k]))
	}
	return b.String()
}

func bashRestoreEnv([]string) string {
	return `for __e in "${__moat_saved[@]}"; do case "$__e" in *==*) export "${__e%%==*}=${__e#*==}";; *) unset "$__e";; esac; done; unset __moat_saved __e`
}

// validEnvKey rejects keys that would break the generated env code.
func validEnvKey(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// runner executes cells for one context.
type runner interface {
	// run executes code, emitting output lines; errors wrapping
	// jupyter.ErrKernelDied mean the runtime exited.
	run(ctx context.Context, code string, emit func(line)) error
	// runSilent executes code without output.
	runSilent(ctx context.Context, code string) error
	restart(ctx context.Context) error
	dead() bool
	close()
}
