package template

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/template/catalog"
)

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
	d, _ := catalog.Lookup("base")
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
