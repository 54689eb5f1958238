package catalog

import (
	"errors"
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

func TestCodeInterpreterDefinition(t *testing.T) {
	d, err := Lookup("code-interpreter-v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	base, _ := Lookup("base")
	for _, p := range append(base.Packages, "python3-ipykernel", "python3-numpy", "python3-pandas",
		"python3-matplotlib", "python3-scipy", "python3-seaborn", "python3-requests",
		"r-base-core", "r-cran-irkernel") {
		if !slices.Contains(d.Packages, p) {
			t.Errorf("code-interpreter-v1 lacks package %s", p)
		}
	}
	i := slices.IndexFunc(d.Files, func(f HostFile) bool { return f.Dest == "/usr/local/bin/deno" })
	if i < 0 {
		t.Fatalf("no deno in %+v", d.Files)
	}
	if want := "@deno/linux-x64-glibc@" + DenoVersion; d.Files[i].NPM != want {
		t.Errorf("deno npm spec = %q, want %q", d.Files[i].NPM, want)
	}
	if d.CacheKey() == base.CacheKey() {
		t.Error("code-interpreter-v1 shares base's cache key")
	}
	// The Deno version is part of the cache key.
	other := d
	other.Files = slices.Clone(d.Files)
	other.Files[i].NPM = "@deno/linux-x64-glibc@2.9.5"
	if other.CacheKey() == d.CacheKey() {
		t.Error("changing the Deno version keeps the cache key")
	}
	// Lookup copies Files.
	d.Files[i].Dest = "/mutated"
	if again, _ := Lookup("code-interpreter-v1"); again.Files[i].Dest == "/mutated" {
		t.Error("Lookup returned the table's Files slice, not a copy")
	}
}

func TestFilesDoNotChangeKeysOfTemplatesWithoutFiles(t *testing.T) {
	d, _ := Lookup("base")
	key := d.CacheKey()
	d.Files = []HostFile{}
	if d.CacheKey() != key {
		t.Error("an empty Files list changes the cache key")
	}
}

func TestValidateFiles(t *testing.T) {
	good := HostFile{Name: "deno", NPM: "@deno/linux-x64-glibc@2.9.6", Dest: "/usr/local/bin/deno", Mode: 0o755}
	tests := []struct {
		name    string
		mutate  func(*HostFile)
		wantErr string
	}{
		{"good", func(*HostFile) {}, ""},
		{"unscoped", func(f *HostFile) { f.NPM = "esbuild@0.25.0" }, ""},
		{"prerelease", func(f *HostFile) { f.NPM = "x@1.2.3-rc.1" }, ""},
		{"member", func(f *HostFile) { f.Member = "bin/deno" }, ""},
		{"no name", func(f *HostFile) { f.Name = "" }, "needs a name"},
		{"no version", func(f *HostFile) { f.NPM = "@deno/linux-x64-glibc" }, "exact-version"},
		{"range", func(f *HostFile) { f.NPM = "@deno/linux-x64-glibc@^2.9.6" }, "exact-version"},
		{"tag", func(f *HostFile) { f.NPM = "@deno/linux-x64-glibc@latest" }, "exact-version"},
		{"flag injection", func(f *HostFile) { f.NPM = "--registry=http://evil@1.0.0" }, "exact-version"},
		{"relative dest", func(f *HostFile) { f.Dest = "usr/bin/deno" }, "absolute"},
		{"unclean dest", func(f *HostFile) { f.Dest = "/usr/../bin/deno" }, "absolute"},
		{"root dest", func(f *HostFile) { f.Dest = "/" }, "absolute"},
		{"member escapes", func(f *HostFile) { f.Member = "../x" }, "member"},
		{"setuid", func(f *HostFile) { f.Mode = 0o4755 | 1<<23 }, "mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := Lookup("base")
			f := good
			tt.mutate(&f)
			d.Files = []HostFile{f}
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
