//go:build linux

package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The moat binary the manifests are checked against: built once per test
// run from this tree, removed by TestMain.
var (
	buildOnce sync.Once
	binDir    string
	moatBin   string
	buildErr  error

	helpMu sync.Mutex
	helps  = map[string]*cli{} // by command path
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// moatBinary returns the path of a moat binary built from this tree.
func moatBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "moat-deploy-test-"); buildErr != nil {
			return
		}
		moatBin = filepath.Join(binDir, "moat")
		// go test puts its own toolchain first on PATH.
		out, err := exec.Command("go", "build", "-o", moatBin, "github.com/moatsh/moat/cmd/moat").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/moat: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return moatBin
}

// cli is what `moat PATH --help` says of one command: its flags (global
// ones included) and the MOAT_* variables it reads.
type cli struct {
	path  string
	flags map[string]cliFlag // by long name ("addr") and short form ("-v")
	env   map[string]bool
}

// cliFlag is one flag of a command.
type cliFlag struct {
	value bool   // takes a value (not a bool flag)
	def   string // the default its help shows, "" for none
}

var (
	// A flag's help line: "  -v, --verbose   debug logging" (no value),
	// "      --addr string   listen …" (a value: one space, then its
	// name; pflag names it after a backquoted word of the usage, so it may
	// have spaces).
	flagLineRE = regexp.MustCompile(`^\s+(?:-([a-zA-Z]), )?--([a-z0-9][a-z0-9-]*)( \S|\s{2,}|$)`)
	defaultRE  = regexp.MustCompile(`\(default "([^"]*)"\)`)
	envRE      = regexp.MustCompile(`\benv (MOAT_[A-Z0-9_]+)`)
)

// moatHelp is the help of command path ("serve", "cluster join") of the
// built binary; an error if path is not a moat command.
func moatHelp(t *testing.T, path string) (*cli, error) {
	t.Helper()
	bin := moatBinary(t)
	helpMu.Lock()
	defer helpMu.Unlock()
	if c := helps[path]; c != nil {
		return c, nil
	}
	args := append(strings.Fields(path), "--help")
	out, err := exec.Command(bin, args...).CombinedOutput()
	text := string(out)
	if err != nil || !strings.Contains(text, "\n  moat "+path+" ") {
		return nil, fmt.Errorf("moat %s is not a moat command (%v):\n%s", path, err, text)
	}
	c := &cli{path: path, flags: map[string]cliFlag{}, env: map[string]bool{}}
	for line := range strings.Lines(text) {
		m := flagLineRE.FindStringSubmatch(strings.TrimRight(line, "\n"))
		if m == nil {
			continue
		}
		f := cliFlag{value: strings.HasPrefix(m[3], " ") && len(strings.TrimSpace(m[3])) > 0}
		if d := defaultRE.FindStringSubmatch(line); d != nil {
			f.def = d[1]
		}
		c.flags[m[2]] = f
		if m[1] != "" {
			c.flags["-"+m[1]] = f
		}
	}
	for _, m := range envRE.FindAllStringSubmatch(text, -1) {
		c.env[m[1]] = true
	}
	if len(c.flags) == 0 {
		return nil, fmt.Errorf("moat %s --help lists no flags:\n%s", path, text)
	}
	helps[path] = c
	return c, nil
}

// mustHelp is moatHelp, fatal on an error.
func mustHelp(t *testing.T, path string) *cli {
	t.Helper()
	c, err := moatHelp(t, path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// invocation is one moat command line of a manifest, checked against the
// help of the command it names.
type invocation struct {
	cli   *cli
	flags map[string][]string // by long name (or "-x"): the values given
}

// has reports whether the command line gives flag name.
func (iv invocation) has(name string) bool { _, ok := iv.flags[name]; return ok }

// value is the last value of flag name ("" when not given).
func (iv invocation) value(name string) string {
	vs := iv.flags[name]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// valueOr is flag name's value, else its default.
func (iv invocation) valueOr(name string) string {
	if iv.has(name) {
		return iv.value(name)
	}
	return iv.cli.flags[name].def
}

// parseInvocation checks argv, the words after the moat binary: the
// command path (words before the first flag) must be a moat command,
// every flag one it defines, every word a flag or a flag's value (the
// commands the manifests run take no arguments).
func parseInvocation(t *testing.T, argv []string) (invocation, error) {
	t.Helper()
	i := slices.IndexFunc(argv, func(w string) bool { return strings.HasPrefix(w, "-") })
	if i < 0 {
		i = len(argv)
	}
	// The command is the longest run of leading words that names one; any
	// word after it that is not a flag's value is an argument.
	iv := invocation{flags: map[string][]string{}}
	var err error
	for ; i > 0; i-- {
		if iv.cli, err = moatHelp(t, strings.Join(argv[:i], " ")); err == nil {
			break
		}
	}
	if iv.cli == nil {
		return iv, fmt.Errorf("moat %q: no moat command: %v", argv, err)
	}
	for rest := argv[i:]; len(rest) > 0; rest = rest[1:] {
		w := rest[0]
		if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
			return iv, fmt.Errorf("moat %s: %q is not a flag (the command takes no arguments)", iv.cli.path, w)
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(w, "--"), "=")
		if !strings.HasPrefix(w, "--") {
			name, val, hasVal = w[:2], w[2:], len(w) > 2
		}
		f, ok := iv.cli.flags[name]
		if !ok {
			return iv, fmt.Errorf("moat %s: flag %s is not one moat %s --help lists", iv.cli.path, w, iv.cli.path)
		}
		switch {
		case f.value && !hasVal:
			if len(rest) < 2 {
				return iv, fmt.Errorf("moat %s: flag %s has no value", iv.cli.path, w)
			}
			val, rest = rest[1], rest[1:]
		case !f.value && !hasVal:
			val = "true"
		}
		iv.flags[name] = append(iv.flags[name], val)
	}
	return iv, nil
}

// shellWords splits one shell command line into words: quotes removed,
// backslash escapes outside single quotes applied, variables and command
// substitutions kept as written (a "$(cat "f")" stays one word).
func shellWords(line string) []string {
	var (
		words []string
		cur   strings.Builder
		in    bool // a word has started
		quote rune
	)
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == '\'':
			cur.WriteRune(r)
		case r == '\\' && i+1 < len(rs):
			i++
			cur.WriteRune(rs[i])
			in = true
		case quote == 0 && (r == '"' || r == '\''):
			quote, in = r, true
		case quote == 0 && (r == ' ' || r == '\t'):
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// scriptInvocations returns the argv (after the binary) of every moat
// command line of a shell script: lines joined at backslash-newlines,
// those whose command (after an optional exec) is moat, up to the first
// control operator.
func scriptInvocations(script string) [][]string {
	var out [][]string
	for line := range strings.SplitSeq(strings.ReplaceAll(script, "\\\n", " "), "\n") {
		words := shellWords(strings.TrimSpace(line))
		if len(words) > 0 && words[0] == "exec" {
			words = words[1:]
		}
		if len(words) == 0 || !isMoat(words[0]) {
			continue
		}
		words = words[1:]
		if i := slices.IndexFunc(words, isControlOperator); i >= 0 {
			words = words[:i]
		}
		out = append(out, words)
	}
	return out
}

// isMoat reports whether a command names the moat binary.
func isMoat(cmd string) bool { return filepath.Base(cmd) == "moat" }

func isControlOperator(w string) bool {
	return slices.Contains([]string{";", "&&", "||", "|", "&", ">", ">>", "<", "2>", "2>&1"}, w)
}

// shellVarRE finds the variables a shell script reads ($NAME, ${NAME…}).
var shellVarRE = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)

func TestShellWords(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`moat serve --role=node`, []string{"moat", "serve", "--role=node"}},
		{`exec moat cluster join --api "$API" --token "$(cat "/etc/x/$N")"`,
			[]string{"exec", "moat", "cluster", "join", "--api", "$API", "--token", "$(cat /etc/x/$N)"}},
		{`echo 'a b' "c\"d" e\ f`, []string{"echo", "a b", `c"d`, "e f"}},
	} {
		if got := shellWords(tc.line); !slices.Equal(got, tc.want) {
			t.Errorf("shellWords(%s) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

func TestParseInvocation(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		ok   bool
	}{
		{[]string{"serve", "--role=api", "--addr", ":3000", "-v"}, true},
		{[]string{"serve", "--no-such-flag"}, false},
		{[]string{"serve", "--addr"}, false},
		{[]string{"serve", "extra"}, false},
		{[]string{"cluster", "join", "--node-id", "n1", "--dir", "/d"}, true},
		{[]string{"cluster", "join", "--role=node"}, false},
	} {
		_, err := parseInvocation(t, tc.argv)
		if (err == nil) != tc.ok {
			t.Errorf("parseInvocation(%q): err %v, want ok %v", tc.argv, err, tc.ok)
		}
	}
	help := mustHelp(t, "serve")
	if f := help.flags["data-dir"]; !f.value || f.def == "" {
		t.Errorf("moat serve --data-dir: %+v, want a flag with a value and a default", f)
	}
	if f := help.flags["verbose"]; f.value {
		t.Errorf("moat serve --verbose takes a value?")
	}
	if !help.env["MOAT_STORE"] || !help.env["MOAT_NODE_ADDR"] {
		t.Errorf("moat serve --help: env %v lacks MOAT_STORE or MOAT_NODE_ADDR", help.env)
	}
}
