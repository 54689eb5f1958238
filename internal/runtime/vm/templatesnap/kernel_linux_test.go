package templatesnap

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// TestBootFilesMisconfigured: a missing guest init or kernel file is the
// server's misconfiguration (500 with a short public text), never the
// client's NotFound (404, "sandbox not found" in the SDKs); the path stays
// in the error text for the log.
func TestBootFilesMisconfigured(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no moat-vminit on $PATH
	initFile := filepath.Join(t.TempDir(), "moat-vminit")
	if err := os.WriteFile(initFile, []byte("#!"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, kernel, init, wantPublic, wantLog string
	}{
		{name: "no init", kernel: "/nonexistent/vmlinuz-moattest", init: "/nonexistent/moat-vminit",
			wantPublic: "microVM runtime misconfigured: guest init not found", wantLog: "moat-vminit not found"},
		{name: "no kernel modules", kernel: "/nonexistent/vmlinuz-moattest", init: initFile,
			wantPublic: "microVM runtime misconfigured: guest kernel or init unusable", wantLog: "/lib/modules/moattest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := New(Config{Dir: t.TempDir(), Kernel: tc.kernel, Init: tc.init})
			_, err := set.BootFiles()
			if err == nil {
				t.Fatal("BootFiles succeeded")
			}
			if errdefs.IsNotFound(err) || errhttp.ToHTTP(err) != http.StatusInternalServerError {
				t.Errorf("%v: status %d, want 500 and not NotFound", err, errhttp.ToHTTP(err))
			}
			if msg, _ := errdefs.PublicMessage(err); msg != tc.wantPublic {
				t.Errorf("public text %q, want %q", msg, tc.wantPublic)
			}
			if !strings.Contains(err.Error(), tc.wantLog) {
				t.Errorf("log text %q lacks %q", err, tc.wantLog)
			}
		})
	}
}
