package envdcall

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/envdtest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// TestStartTemplateCmd runs start and ready commands through a real envd
// (host mode).
func TestStartTemplateCmd(t *testing.T) {
	e := envdtest.Start(t)
	u, _ := url.Parse(e.URL)
	port, _ := strconv.Atoi(u.Port())
	c := &Client{HTTP: &http.Client{}, Port: port, Log: slog.New(slog.DiscardHandler), Waiter: waiter{}}
	addr := netip.MustParseAddr(u.Hostname())
	ctx := context.Background()
	flag := filepath.Join(t.TempDir(), "ready")
	for _, tc := range []struct {
		name    string
		tc      store.TemplateConfig
		timeout time.Duration
		want    error // nil: ready
	}{
		{"nothing to run", store.TemplateConfig{}, 0, nil},
		{"start only: returns while it runs", store.TemplateConfig{StartCmd: "sleep 60"}, 10 * time.Second, nil},
		{"ready once the start command is", store.TemplateConfig{StartCmd: "sleep 0.3; touch " + flag,
			ReadyCmd: "test -f " + flag, Workdir: "/tmp"}, 30 * time.Second, nil},
		{"never ready", store.TemplateConfig{ReadyCmd: "exit 1"}, 1500 * time.Millisecond, errdefs.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctx
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			err := c.StartTemplateCmd(ctx, addr, store.Sandbox{ID: "s1"}, tc.tc, "")
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	if err := c.WarmUp(ctx, addr, "user"); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
}
