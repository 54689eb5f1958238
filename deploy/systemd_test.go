//go:build linux

package deploy

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/cluster/join"
	"github.com/moatsh/moat/internal/store/pgsql"
)

const (
	systemdDir = "systemd"
	envExample = "moat.env.example"
	envFile    = "/etc/moat/moat.env" // where moat.env.example goes
	moatPath   = "/usr/local/bin/moat"
)

// unit is a systemd unit file: section → key → values (in order; a key
// may be given more than once).
type unit map[string]map[string][]string

// one is the value of a key given once ("" if not given; an error if
// given twice).
func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	vs := u[section][key]
	if len(vs) > 1 {
		t.Errorf("[%s] %s given %d times", section, key, len(vs))
	}
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// unitSections are the sections a service unit may have.
var unitSections = map[string]bool{"Unit": true, "Service": true, "Install": true}

// parseUnit reads a unit file: comments (# or ;), [Section] headers,
// Key=Value lines, continued by a backslash at a line's end.
func parseUnit(path string) (unit, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		for strings.HasSuffix(line, `\`) && sc.Scan() {
			n++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(sc.Text())
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.TrimSuffix(line[1:], "]")
			if !strings.HasSuffix(line, "]") || !unitSections[section] {
				return nil, fmt.Errorf("%s:%d: section %q", path, n, line)
			}
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.TrimSpace(k) == "" {
				return nil, fmt.Errorf("%s:%d: not Key=Value in a section: %q", path, n, line)
			}
			k = strings.TrimSpace(k)
			u[section][k] = append(u[section][k], strings.TrimSpace(v))
		}
	}
	return u, sc.Err()
}

// parseEnvFile reads an EnvironmentFile: KEY=VALUE lines and comments.
func parseEnvFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(k) {
			return nil, fmt.Errorf("%s:%d: not KEY=VALUE: %q", path, i+1, line)
		}
		env[k] = v
	}
	return env, nil
}

// systemdVarRE finds the variables systemd expands in a command line
// (${NAME} or $NAME; $$ is a literal $ for the command).
var systemdVarRE = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

func TestSystemdUnits(t *testing.T) {
	env, err := parseEnvFile(filepath.Join(systemdDir, envExample))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file, role string
		node       bool
	}{
		{"moat-api.service", "api", false},
		{"moat-node.service", "node", true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			u, err := parseUnit(filepath.Join(systemdDir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			for s := range unitSections {
				if u[s] == nil {
					t.Errorf("no [%s] section", s)
				}
			}
			if f := u.one(t, "Service", "EnvironmentFile"); f != envFile {
				t.Errorf("EnvironmentFile=%s, want %s", f, envFile)
			}
			if user := u.one(t, "Service", "User"); user != "" && user != "root" {
				t.Errorf("User=%s: moat serve runs as root", user)
			}
			iv := checkExecStart(t, u, env)
			if r := iv.value("role"); r != tc.role {
				t.Errorf("moat serve --role %q, want %s", r, tc.role)
			}
			if !tc.node {
				return
			}
			if a := iv.value("node-addr"); a != "${MOAT_NODE_ADDR}" {
				t.Errorf("--node-addr %q, want ${MOAT_NODE_ADDR}", a)
			}
			for k, want := range map[string]string{"Delegate": "yes", "KillMode": "process"} {
				if got := u.one(t, "Service", k); got != want {
					t.Errorf("%s=%s, want %s", k, got, want)
				}
			}
			cert := filepath.Join(strings.TrimPrefix(app.NodeCertDir(""), "/"), join.CertFile)
			if pre := strings.Join(u["Service"]["ExecStartPre"], "\n"); !strings.Contains(pre, cert) {
				t.Errorf("ExecStartPre does not check for DATA-DIR/%s before a start", cert)
			}
		})
	}
}

// checkExecStart checks u's ExecStart: moat serve with flags moat serve
// has, the store not on the command line, and every variable it and
// ExecStartPre expand set in the example environment file.
func checkExecStart(t *testing.T, u unit, env map[string]string) invocation {
	t.Helper()
	for _, line := range append(u["Service"]["ExecStartPre"], u["Service"]["ExecStart"]...) {
		for _, m := range systemdVarRE.FindAllStringSubmatch(line, -1) {
			if name := m[1] + m[2]; name != "" && env[name] == "" {
				t.Errorf("the command line reads $%s, which %s does not set", name, envExample)
			}
		}
	}
	words := shellWords(u.one(t, "Service", "ExecStart"))
	if len(words) < 2 || strings.TrimLeft(words[0], "-@:+!") != moatPath || words[1] != "serve" {
		t.Fatalf("ExecStart=%q: want %s serve …", words, moatPath)
	}
	iv, err := parseInvocation(t, words[1:])
	if err != nil {
		t.Fatal(err)
	}
	if iv.has("store") {
		t.Error("ExecStart has --store: a database URL on the command line shows its password; MOAT_STORE in the environment file")
	}
	return iv
}

// TestSystemdEnvExample: every MOAT_* variable of the example is one moat
// serve reads, the store is PostgreSQL (servers share it), and a node
// address is HOST:PORT.
func TestSystemdEnvExample(t *testing.T) {
	env, err := parseEnvFile(filepath.Join(systemdDir, envExample))
	if err != nil {
		t.Fatal(err)
	}
	help := mustHelp(t, "serve")
	for k := range env {
		if strings.HasPrefix(k, "MOAT_") && !help.env[k] {
			t.Errorf("%s: moat serve --help names no variable %s", envExample, k)
		}
	}
	if !pgsql.IsDSN(env["MOAT_STORE"]) {
		t.Errorf("MOAT_STORE=%s: want a postgres:// URL", env["MOAT_STORE"])
	}
	if _, port, err := net.SplitHostPort(env["MOAT_NODE_ADDR"]); err != nil || port == "0" {
		t.Errorf("MOAT_NODE_ADDR=%s: want HOST:PORT (%v)", env["MOAT_NODE_ADDR"], err)
	}
}

// TestSystemdAnalyze has systemd-analyze verify the units (where it is
// installed), moat replaced by the built binary: an unknown key or a bad
// value is a warning it prints.
func TestSystemdAnalyze(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze")
	}
	bin := moatBinary(t)
	dir := t.TempDir()
	var units []string
	for _, f := range []string{"moat-api.service", "moat-node.service"} {
		b, err := os.ReadFile(filepath.Join(systemdDir, f))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, f)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), moatPath, bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, p)
	}
	out, err := exec.Command(sa, append([]string{"verify", "--man=no"}, units...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
