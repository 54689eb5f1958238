package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
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
	// Files are fetched on the host (not inside the chroot) and installed
	// into the rootfs after the steps, before envd.
	Files []HostFile

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

// HostFile is a file the build fetches on the host and copies into the
// rootfs: today an executable taken from an npm package (npm pack, cached
// under <DataDir>/cache/npm per exact package version).
type HostFile struct {
	Name string // short label shown in progress output
	// NPM is the package spec "name@version"; the version must be exact,
	// so that the cache key (which hashes it) pins the content.
	NPM string
	// Member is the file to take, relative to the package root ("package/"
	// in the tarball); "" means the executable named like Dest's base name.
	Member string
	Dest   string      // absolute path in the rootfs
	Mode   fs.FileMode // permission bits; 0 means 0755
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

// profileStep keeps a login shell from forking: the SDKs run every
// command as `bash -l -c CMD`, and Debian's /etc/profile runs `$(id -u)`
// (a fork and an exec of id(1)) to pick PATH, which is ~1 ms on the host
// and tens of milliseconds in a microVM under TCG. Bash knows its EUID;
// other shells (EUID unset) still ask id(1), so the result is the same.
var profileStep = Step{Name: "profile", Script: `
sed -i 's/"$(id -u)"/"${EUID:-$(id -u)}"/' /etc/profile
grep -q 'EUID:-' /etc/profile
`}

// commonSteps run before a definition's own steps in every template.
var commonSteps = []Step{userStep, slimStep, profileStep}

// basePackages are the packages of the "base" template, kept lean.
var basePackages = []string{
	"bash", "ca-certificates", "coreutils", "curl", "git", "iproute2",
	"less", "procps", "python3", "sudo",
}

// DenoVersion is the Deno release in code-interpreter-v1 (JavaScript and
// TypeScript kernels: `deno jupyter`). It is part of the cache key.
const DenoVersion = "2.9.6"

// codeInterpreterPackages are the Debian packages of code-interpreter-v1 on
// top of base: the Python kernel with the usual data libraries, and R with
// IRkernel.
var codeInterpreterPackages = append(slices.Clone(basePackages),
	"python3-ipykernel", "python3-numpy", "python3-pandas", "python3-matplotlib",
	"python3-scipy", "python3-seaborn", "python3-requests",
	"r-base-core", "r-cran-irkernel",
)

// kernelspecStep makes sure the Jupyter kernelspecs envd looks for exist
// (Debian's python3-ipykernel and r-cran-irkernel ship them; this registers
// them should a package stop doing so), registers Deno's, and checks that
// the libraries import.
var kernelspecStep = Step{Name: "kernelspecs", Script: `
k=/usr/share/jupyter/kernels
if [ ! -f $k/python3/kernel.json ]; then
	mkdir -p $k/python3
	cat > $k/python3/kernel.json <<'EOF'
{"argv": ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "Python 3 (ipykernel)", "language": "python"}
EOF
fi
if [ ! -f $k/ir/kernel.json ]; then
	mkdir -p $k/ir
	cat > $k/ir/kernel.json <<'EOF'
{"argv": ["R", "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"], "display_name": "R", "language": "R"}
EOF
fi
# Deno (installed after the steps) has no package to ship a kernelspec.
# NO_COLOR: without it Deno's text/plain results carry ANSI colour codes.
# interrupt_mode message: SIGINT kills deno's kernel (state lost), while an
# interrupt_request stops a busy loop and keeps the state.
mkdir -p $k/deno
cat > $k/deno/kernel.json <<'EOF'
{"argv": ["/usr/local/bin/deno", "jupyter", "--kernel", "--conn", "{connection_file}"], "display_name": "Deno", "language": "typescript", "interrupt_mode": "message", "env": {"NO_COLOR": "1"}}
EOF
python3 -c 'import ipykernel, numpy, pandas, matplotlib, scipy, seaborn, requests'
R --slave -e 'library(IRkernel)' >/dev/null
`}

// builtins is the table of templates `moat template build NAME` knows.
// Add new ones here: a Definition with its packages, steps and host files
// is all a template needs.
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
	"code-interpreter-v1": {
		Name:     "code-interpreter-v1",
		Suite:    DefaultSuite,
		Mirror:   DefaultMirror,
		Variant:  DefaultVariant,
		Packages: codeInterpreterPackages,
		Steps:    []Step{kernelspecStep},
		Files: []HostFile{{
			Name: "deno",
			NPM:  "@deno/linux-x64-glibc@" + DenoVersion,
			Dest: "/usr/local/bin/deno",
			Mode: 0o755,
		}},
		CPUCount:   2,
		MemoryMB:   1024,
		DiskSizeMB: 4096,
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
	d.Files = slices.Clone(d.Files)
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
	// npmSpecRE accepts "[@scope/]name@X.Y.Z[-pre][+build]": exact versions only.
	npmSpecRE = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*@[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$`)
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
	for i, f := range d.Files {
		switch {
		case f.Name == "":
			return fmt.Errorf("template %s: file %d needs a name", d.Name, i)
		case !npmSpecRE.MatchString(f.NPM):
			return fmt.Errorf("template %s: file %s: npm spec %q: want name@exact-version", d.Name, f.Name, f.NPM)
		case !path.IsAbs(f.Dest) || path.Clean(f.Dest) != f.Dest || f.Dest == "/":
			return fmt.Errorf("template %s: file %s: destination %q must be a clean absolute path", d.Name, f.Name, f.Dest)
		case f.Member != "" && !fs.ValidPath(f.Member):
			return fmt.Errorf("template %s: file %s: invalid member %q", d.Name, f.Name, f.Member)
		case f.Mode&^fs.ModePerm != 0:
			return fmt.Errorf("template %s: file %s: mode %v has non-permission bits", d.Name, f.Name, f.Mode)
		}
	}
	return nil
}

// AllSteps returns every step the build runs: common ones first.
func (d Definition) AllSteps() []Step {
	return append(slices.Clone(commonSteps), d.Steps...)
}

// CacheKey is the hex sha256 of everything that determines the mmdebstrap
// output: suite, mirror, variant, sorted packages, all steps, the host files
// (npm versions included) and the build script version. Resources and envd
// are not part of it (envd is refreshed separately).
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
		// omitempty keeps the keys of templates without files unchanged.
		Files []HostFile `json:",omitempty"`
	}{BuildScriptVersion, d.Suite, strings.TrimRight(d.Mirror, "/"), d.Variant, pkgs, d.AllSteps(), d.Files}
	b, err := json.Marshal(in)
	if err != nil { // cannot happen for these types
		panic(fmt.Sprintf("template cache key: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ValidName reports whether name can name a template (and its directory).
func ValidName(name string) bool { return nameRE.MatchString(name) }
