package template

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Definition describes how to build one template's root filesystem.
// Everything that changes the mmdebstrap output belongs here, because the
// cache key is a hash of it.
type Definition struct {
	Name     string   // template name, also its ID for built-ins
	Suite    string   // Debian suite, e.g. "bookworm"
	Mirror   string   // Debian mirror URL
	Variant  string   // mmdebstrap variant, e.g. "apt" or "minbase"
	Packages []string // extra packages (--include)
	// Steps run in order inside the chroot after the packages are installed
	// (mmdebstrap --customize-hook), as root, with networking available.
	Steps []Step

	// Default resources of sandboxes created from the template.
	CPUCount   int
	MemoryMB   int
	DiskSizeMB int
}

// Step is one shell script run inside the chroot by /bin/sh -e.
type Step struct {
	Name   string // short label shown in progress output
	Script string
}

// BuildScriptVersion is part of every cache key. Bump it whenever the build
// procedure changes in a way the Definition does not capture (mmdebstrap
// flags, common steps, finalize files), so old rootfs caches are rebuilt.
const BuildScriptVersion = 3

// Defaults shared by the built-in definitions.
const (
	DefaultSuite   = "bookworm"
	DefaultMirror  = "http://deb.debian.org/debian"
	DefaultVariant = "apt"
)

// SandboxUser is the unprivileged account every template provides; E2B SDKs
// default to it.
const SandboxUser = "user"

// userStep creates the sandbox user: uid 1000, bash, passwordless sudo.
var userStep = Step{Name: "user", Script: `
if ! id -u user >/dev/null 2>&1; then
	useradd --create-home --home-dir /home/user --shell /bin/bash --uid 1000 --user-group user
fi
mkdir -p /etc/sudoers.d
echo 'user ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/user
chmod 0440 /etc/sudoers.d/user
mkdir -p /home/user
chown -R 1000:1000 /home/user
`}

// slimStep drops manuals, docs and translations, and keeps dpkg from
// installing them later (as Debian's slim container images do).
var slimStep = Step{Name: "slim", Script: `
cat > /etc/dpkg/dpkg.cfg.d/moat-slim <<'EOF'
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
EOF
rm -rf /usr/share/man/* /usr/share/info/*
find /usr/share/doc -depth -mindepth 1 ! -name copyright ! -type d -delete
find /usr/share/doc -depth -mindepth 1 -type d -empty -delete
find /usr/share/locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
`}

// commonSteps run before a definition's own steps in every template.
var commonSteps = []Step{userStep, slimStep}

// basePackages are the packages of the "base" template, kept lean.
var basePackages = []string{
	"bash", "ca-certificates", "coreutils", "curl", "git", "iproute2",
	"less", "procps", "python3", "sudo",
}

// builtins is the table of templates `moat template build NAME` knows.
// Add new ones (code-interpreter-v1, ...) here: a Definition with its
// packages and steps is all a template needs.
var builtins = map[string]Definition{
	"base": {
		Name:       "base",
		Suite:      DefaultSuite,
		Mirror:     DefaultMirror,
		Variant:    DefaultVariant,
		Packages:   basePackages,
		CPUCount:   2,
		MemoryMB:   512,
		DiskSizeMB: 2048,
	},
}

// ErrUnknownTemplate is returned by Lookup for names not in the table.
var ErrUnknownTemplate = errors.New("unknown template")

// Lookup returns the built-in definition called name.
func Lookup(name string) (Definition, error) {
	d, ok := builtins[name]
	if !ok {
		return Definition{}, fmt.Errorf("template %q (known: %s): %w",
			name, strings.Join(Names(), ", "), ErrUnknownTemplate)
	}
	d.Packages = slices.Clone(d.Packages)
	d.Steps = slices.Clone(d.Steps)
	return d, nil
}

// Names lists the built-in templates, sorted.
func Names() []string {
	out := make([]string, 0, len(builtins))
	for n := range builtins {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	suiteRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)
	packageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(:[a-z0-9]+)?$`)
	variants  = []string{"extract", "custom", "essential", "apt", "minbase", "buildd", "important", "standard"}
)

// Validate reports the first problem with d, if any.
func (d Definition) Validate() error {
	switch {
	case !nameRE.MatchString(d.Name):
		return fmt.Errorf("template name %q: want lower-case letters, digits, '.', '_', '-' (max 63)", d.Name)
	case !suiteRE.MatchString(d.Suite):
		return fmt.Errorf("template %s: invalid suite %q", d.Name, d.Suite)
	case !strings.HasPrefix(d.Mirror, "http://") && !strings.HasPrefix(d.Mirror, "https://") &&
		!strings.HasPrefix(d.Mirror, "file://"):
		return fmt.Errorf("template %s: mirror %q must be an http(s) or file URL", d.Name, d.Mirror)
	case !slices.Contains(variants, d.Variant):
		return fmt.Errorf("template %s: unknown variant %q", d.Name, d.Variant)
	case d.CPUCount < 1 || d.MemoryMB < 128 || d.DiskSizeMB < 0:
		return fmt.Errorf("template %s: resources need cpu>=1, memory>=128 MB, disk>=0", d.Name)
	}
	for _, p := range d.Packages {
		if !packageRE.MatchString(p) {
			return fmt.Errorf("template %s: invalid package name %q", d.Name, p)
		}
	}
	for i, s := range d.Steps {
		if s.Name == "" || strings.TrimSpace(s.Script) == "" {
			return fmt.Errorf("template %s: step %d needs a name and a script", d.Name, i)
		}
	}
	return nil
}

// steps returns every step the build runs: common ones first.
func (d Definition) steps() []Step {
	return append(slices.Clone(commonSteps), d.Steps...)
}

// CacheKey is the hex sha256 of everything that determines the mmdebstrap
// output: suite, mirror, variant, sorted packages, all steps and the build
// script version. Resources and envd are not part of it (envd is refreshed
// separately).
func (d Definition) CacheKey() string {
	pkgs := slices.Clone(d.Packages)
	sort.Strings(pkgs)
	pkgs = slices.Compact(pkgs)
	in := struct {
		Version  int
		Suite    string
		Mirror   string
		Variant  string
		Packages []string
		Steps    []Step
	}{BuildScriptVersion, d.Suite, strings.TrimRight(d.Mirror, "/"), d.Variant, pkgs, d.steps()}
	b, err := json.Marshal(in)
	if err != nil { // cannot happen for these types
		panic(fmt.Sprintf("template cache key: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
