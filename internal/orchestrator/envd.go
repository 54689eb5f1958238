package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// envdURL is the base URL of envd in the sandbox at addr.
func (o *Orchestrator) envdURL(addr netip.Addr) string {
	return "http://" + net.JoinHostPort(addr.String(), strconv.Itoa(o.cfg.EnvdPort))
}

// initEnvd waits for envd's /health to answer 204, then POSTs /init. It
// returns only when envd has accepted the sandbox's settings, because the
// SDKs call envd right after create returns. current is the token envd
// already has ("" for a fresh one): after a resume the sandbox's own, in a
// sandbox started from a snapshot the snapshot source's. tc is the
// template's build config (env, workdir, user); the sandbox's own
// envVars win over its env.
func (o *Orchestrator) initEnvd(ctx context.Context, addr netip.Addr, sb store.Sandbox, tc store.TemplateConfig, current string) error {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.ReadyTimeout)
	defer cancel()
	start := time.Now()
	if err := o.waitHealthy(ctx, sb.ID, addr); err != nil {
		return err
	}
	healthy := time.Now()
	user, workdir := "user", "/home/user"
	if tc.User != "" {
		user = tc.User
		if tc.User == "root" {
			workdir = "/root"
		}
	}
	if tc.Workdir != "" {
		workdir = tc.Workdir
	}
	now := time.Now().UTC()
	in := state.Init{
		EnvVars:        mergeEnv(tc.Env, sb.EnvVars),
		Timestamp:      &now,
		DefaultUser:    user,
		DefaultWorkdir: workdir,
		Internal: map[string]string{
			"E2B_SANDBOX":     "true",
			"E2B_SANDBOX_ID":  sb.ID,
			"E2B_TEMPLATE_ID": sb.TemplateID,
		},
	}
	if sb.Secure {
		tok := sb.EnvdAccessToken
		in.AccessToken = &tok
	}
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("envd init: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.envdURL(addr)+"/init", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("envd init: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if current != "" {
		req.Header.Set("X-Access-Token", current)
	}
	resp, err := o.http.Do(req)
	if err != nil {
		return fmt.Errorf("envd init: %v: %w", err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("envd init: status %d: %s: %w", resp.StatusCode, bytes.TrimSpace(msg), errdefs.ErrUnavailable)
	}
	o.log.Debug("envd initialised", "sandboxID", sb.ID, "health", healthy.Sub(start).Round(time.Microsecond),
		"init", time.Since(healthy).Round(time.Microsecond))
	return nil
}

// waitHealthy asks GET /health until 204, ctx's end, or the sandbox dies.
// A runtime returns once envd accepts connections, so the first try
// usually answers; otherwise (a refused connection while envd starts) the
// pause between tries starts at 500 µs and doubles up to 50 ms, instead of
// sleep steps of 20 ms and more that a create would wait out.
func (o *Orchestrator) waitHealthy(ctx context.Context, id string, addr netip.Addr) error {
	url := o.envdURL(addr) + "/health"
	delay := 500 * time.Microsecond
	var last error
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("envd health: %w", err)
		}
		resp, err := o.http.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
			last = fmt.Errorf("status %d", resp.StatusCode)
		} else {
			last = err
		}
		if attempt%10 == 9 && !o.rt.Alive(ctx, id) {
			return fmt.Errorf("sandbox exited before envd was ready (%v): %w", last, errdefs.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("envd not ready after %s (%v): %w", o.cfg.ReadyTimeout, last, errdefs.ErrUnavailable)
		case <-time.After(delay):
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}
