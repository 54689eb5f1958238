package template

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Definition)
		wantErr string
	}{
		{"base is valid", func(*Definition) {}, ""},
		{"empty name", func(d *Definition) { d.Name = "" }, "template name"},
		{"upper-case name", func(d *Definition) { d.Name = "Base" }, "template name"},
		{"path in name", func(d *Definition) { d.Name = "../x" }, "template name"},
		{"bad suite", func(d *Definition) { d.Suite = "Bookworm!" }, "invalid suite"},
		{"ftp mirror", func(d *Definition) { d.Mirror = "ftp://x" }, "mirror"},
		{"unknown variant", func(d *Definition) { d.Variant = "tiny" }, "unknown variant"},
		{"no cpu", func(d *Definition) { d.CPUCount = 0 }, "resources"},
		{"tiny memory", func(d *Definition) { d.MemoryMB = 64 }, "resources"},
		{"bad package", func(d *Definition) { d.Packages = []string{"curl; rm -rf /"} }, "invalid package"},
		{"package with arch", func(d *Definition) { d.Packages = []string{"libc6:amd64"} }, ""},
		{"step without script", func(d *Definition) { d.Steps = []Step{{Name: "x"}} }, "step 0"},
		{"step without name", func(d *Definition) { d.Steps = []Step{{Script: "true"}} }, "step 0"},
		{"good step", func(d *Definition) { d.Steps = []Step{{Name: "x", Script: "true"}} }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := Lookup("base")
			tt.mutate(&d)
			err := d.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	if _, err := Lookup("nope"); !errors.Is(err, ErrUnknownTemplate) {
		t.Fatalf("Lookup(nope) = %v, want ErrUnknownTemplate", err)
	}
	d, err := Lookup("base")
	if err != nil {
		t.Fatal(err)
	}
	d.Packages[0] = "mutated"
	if again, _ := Lookup("base"); again.Packages[0] == "mutated" {
		t.Fatal("Lookup returned the table's slice, not a copy")
	}
	if !slices.Contains(Names(), "base") {
		t.Fatalf("Names() = %v, want base in it", Names())
	}
}

func TestCacheKey(t *testing.T) {
	base, _ := Lookup("base")
	key := base.CacheKey()
	if len(key) != 64 {
		t.Fatalf("CacheKey() = %q, want 64 hex chars", key)
	}
	tests := []struct {
		name   string
		mutate func(*Definition)
		same   bool
	}{
		{"unchanged", func(*Definition) {}, true},
		{"packages reordered", func(d *Definition) { slices.Reverse(d.Packages) }, true},
		{"duplicate package", func(d *Definition) { d.Packages = append(d.Packages, d.Packages[0]) }, true},
		{"mirror trailing slash", func(d *Definition) { d.Mirror += "/" }, true},
		{"resources", func(d *Definition) { d.CPUCount, d.MemoryMB = 8, 4096 }, true},
		{"name", func(d *Definition) { d.Name = "other" }, true},
		{"extra package", func(d *Definition) { d.Packages = append(d.Packages, "vim") }, false},
		{"suite", func(d *Definition) { d.Suite = "trixie" }, false},
		{"mirror", func(d *Definition) { d.Mirror = "http://ftp.de.debian.org/debian" }, false},
		{"variant", func(d *Definition) { d.Variant = "minbase" }, false},
		{"step", func(d *Definition) { d.Steps = []Step{{Name: "x", Script: "true"}} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := Lookup("base")
			tt.mutate(&d)
			if got := d.CacheKey() == key; got != tt.same {
				t.Fatalf("same key = %v, want %v", got, tt.same)
			}
		})
	}
}

func TestLayout(t *testing.T) {
	l := Layout{DataDir: "/var/lib/moat"}
	tests := []struct{ got, want string }{
		{l.TemplateDir("base"), "/var/lib/moat/templates/base"},
		{l.RootfsDir("base"), "/var/lib/moat/templates/base/rootfs"},
		{l.StampPath("base"), "/var/lib/moat/templates/base/stamp.json"},
		{l.BuildLogPath("base"), "/var/lib/moat/templates/base/build.log"},
		{l.LockPath("base"), "/var/lib/moat/templates/base/.lock"},
		{l.AptCacheDir(), "/var/lib/moat/cache/apt"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
	}
	if filepath.Dir(l.RootfsDir("x")) != l.TemplateDir("x") {
		t.Error("rootfs must sit directly in the template dir (atomic rename)")
	}
}

func TestMmdebstrapArgs(t *testing.T) {
	d, _ := Lookup("base")
	args := mmdebstrapArgs(d, "/t/rootfs", []string{"/w/step-00-user.sh"}, "/c/apt")
	n := len(args)
	if got := args[n-3:]; !slices.Equal(got, []string{"bookworm", "/t/rootfs", "http://deb.debian.org/debian"}) {
		t.Errorf("positional args = %v", got)
	}
	joined := strings.Join(args, "\n")
	for _, want := range []string{
		"--mode=root", "--variant=apt", "--include=bash,ca-certificates,",
		`--customize-hook=chroot "$1" /bin/sh -e < '/w/step-00-user.sh'`,
		"--setup-hook=sync-in /c/apt /var/cache/apt/archives/",
		"--customize-hook=sync-out /var/cache/apt/archives /c/apt",
		"--skip=essential/unlink",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args miss %q:\n%s", want, joined)
		}
	}
	// The cache is synced out after the last step, so steps' downloads are kept.
	if !strings.Contains(args[n-4], "sync-out") {
		t.Errorf("sync-out is not the last hook: %v", args[n-4])
	}
	noCache := strings.Join(mmdebstrapArgs(d, "/t", nil, ""), " ")
	if strings.Contains(noCache, "sync-") || strings.Contains(noCache, "essential/unlink") {
		t.Errorf("cache hooks present without a cache: %s", noCache)
	}
}

func TestShellQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/a/b", "'/a/b'"},
		{"it's", `'it'\''s'`},
		{"", "''"},
	}
	for _, tt := range tests {
		if got := shellQuote(tt.in); got != tt.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
