// Package envdcall is the orchestrator's side of envd, the daemon in every
// sandbox: POST /init before a create returns, GET /health while envd
// starts, a template's start and ready commands, a warm-up command, and
// the disk figures of GET /metrics. It exists apart from the lifecycle so
// that the HTTP and Connect calls, their retries and the mapping of envd's
// answers onto error kinds are one unit that knows no sandbox state.
package envdcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// Client calls envd in sandboxes. Its fields are set once; it is safe for
// concurrent use.
type Client struct {
	HTTP         *http.Client
	Port         int           // envd's port inside the sandbox
	ReadyTimeout time.Duration // how long Init waits for envd
	Log          *slog.Logger
	// Waiter is the runtime: a sandbox whose process ends stops the wait
	// for envd at once.
	Waiter interface {
		Wait(ctx context.Context, id string) (runtime.ExitStatus, error)
	}
	// EgressCA is the egress proxy's CA certificate (PEM): /init hands it
	// to sandboxes whose network.rules set headers (see TrustEgressCA);
	// nil refuses such sandboxes.
	EgressCA []byte
}

// URL is the base URL of envd in the sandbox at addr.
func (c *Client) URL(addr netip.Addr) string {
	return "http://" + net.JoinHostPort(addr.String(), strconv.Itoa(c.Port))
}

// Init POSTs /init to envd and returns only when envd has accepted the
// sandbox's settings, because the SDKs call envd right after create
// returns. The runtimes return once envd accepts connections, so /init goes
// first; only when it cannot reach envd (a refused or reset connection
// while envd starts) does Init wait for /health to answer 204 and post
// again (/init is idempotent). current is the token envd already has (""
// for a fresh one): after a resume the sandbox's own, in a sandbox started
// from a snapshot the snapshot source's. tc is the template's build config
// (env, workdir, user); the sandbox's own envVars win over its env.
func (c *Client) Init(ctx context.Context, addr netip.Addr, sb store.Sandbox, tc store.TemplateConfig, current string) error {
	ctx, cancel := context.WithTimeout(ctx, c.ReadyTimeout)
	defer cancel()
	start := time.Now()
	in := initRequest(sb, tc)
	if err := c.withCA(&in, sb); err != nil {
		return err
	}
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("envd init: %w", err)
	}
	reached, err := c.postInit(ctx, addr, body, current, in.EgressCA != "")
	var healthy time.Duration
	if !reached {
		if herr := c.WaitHealthy(ctx, sb.ID, addr); herr != nil {
			return herr
		}
		healthy = time.Since(start)
		_, err = c.postInit(ctx, addr, body, current, in.EgressCA != "")
		// The first request may have reached envd, which then took the
		// sandbox's new access token, and only its answer was lost (a
		// loaded host): the retry proves the new token instead.
		if errors.Is(err, errInitRefused) && in.AccessToken != nil && *in.AccessToken != current {
			_, err = c.postInit(ctx, addr, body, *in.AccessToken, in.EgressCA != "")
		}
	}
	if err != nil {
		return err
	}
	c.Log.Debug("envd initialised", "sandboxID", sb.ID, "health", healthy.Round(time.Microsecond),
		"took", time.Since(start).Round(time.Microsecond))
	return nil
}

// initRequest is the body of sb's /init.
func initRequest(sb store.Sandbox, tc store.TemplateConfig) state.Init {
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
		EnvVars:        MergeEnv(tc.Env, sb.EnvVars),
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
	return in
}

// errInitRefused marks envd's 401 to an /init: it holds another access token.
var errInitRefused = errors.New("envd refused the access token")

// postInit POSTs body to envd's /init; reached is false when no answer came
// (the error is then the transport's). With withCA, envd must confirm that
// it installed the egress CA (an older envd ignores the field).
func (c *Client) postInit(ctx context.Context, addr netip.Addr, body []byte, current string, withCA bool) (reached bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL(addr)+"/init", bytes.NewReader(body))
	if err != nil {
		return true, fmt.Errorf("envd init: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if current != "" {
		req.Header.Set("X-Access-Token", current)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return ctx.Err() != nil, fmt.Errorf("envd init: %v: %w", err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		kind := FromEnvd(errhttp.ToNative(resp.StatusCode))
		if resp.StatusCode == http.StatusUnauthorized {
			kind = errors.Join(kind, errInitRefused)
		}
		return true, fmt.Errorf("envd init: status %d: %s: %w", resp.StatusCode, bytes.TrimSpace(msg), kind)
	}
	if withCA && resp.Header.Get(state.EgressCAHeader) != state.EgressCAInstalled {
		return true, errdefs.Publicf(errdefs.ErrNotImplemented, "network.rules: the envd in this sandbox's template "+
			"cannot install the egress CA (rebuild the template with this server's envd)")
	}
	return true, nil
}

// HasHeaderRules reports whether sb's network.rules set any header: its
// HTTPS to those domains is intercepted, so it must trust the egress CA.
func HasHeaderRules(sb store.Sandbox) bool {
	for _, r := range sb.Network.Rules {
		if len(r.Headers) > 0 {
			return true
		}
	}
	return false
}

// withCA adds the egress CA to in when sb has header rules.
func (c *Client) withCA(in *state.Init, sb store.Sandbox) error {
	if !HasHeaderRules(sb) {
		return nil
	}
	if len(c.EgressCA) == 0 {
		return errdefs.Publicf(errdefs.ErrNotImplemented, "network.rules: header injection at egress is unavailable "+
			"on this server (its egress CA could not be loaded; see the server log)")
	}
	in.EgressCA = string(c.EgressCA)
	return nil
}

// TrustEgressCA makes a running sandbox that has header rules in sb trust
// the egress CA (an /init carrying only the CA; envd installs it once),
// so that processes started afterwards accept the proxy's certificates.
// A paused sandbox gets it with the /init of its resume; a sandbox without
// header rules needs nothing.
func (c *Client) TrustEgressCA(ctx context.Context, sb store.Sandbox) error {
	if !HasHeaderRules(sb) || sb.State != store.StateRunning {
		return nil
	}
	in := state.Init{Internal: map[string]string{"E2B_SANDBOX_ID": sb.ID}}
	if err := c.withCA(&in, sb); err != nil {
		return err
	}
	addr, err := netip.ParseAddr(sb.Addr)
	if err != nil {
		return fmt.Errorf("sandbox %s: address %q: %w", sb.ID, sb.Addr, errdefs.ErrInternal)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("envd init: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.ReadyTimeout)
	defer cancel()
	if _, err := c.postInit(ctx, addr, body, sb.EnvdAccessToken, true); err != nil {
		return fmt.Errorf("sandbox %s: trust the egress CA: %w", sb.ID, err)
	}
	return nil
}

// WaitHealthy asks GET /health until 204, ctx's end, or the sandbox dies.
// A runtime returns once envd accepts connections, so the first try
// usually answers; otherwise (a refused connection while envd starts) the
// pause between tries starts at 500 µs and doubles up to 50 ms, instead of
// sleep steps of 20 ms and more that a create would wait out.
func (c *Client) WaitHealthy(ctx context.Context, id string, addr netip.Addr) error {
	url := c.URL(addr) + "/health"
	delay := 500 * time.Microsecond
	var last error
	wctx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	exited := c.exited(wctx, id)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("envd health: %w", err)
		}
		resp, err := c.HTTP.Do(req)
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
		select {
		case <-exited:
			return fmt.Errorf("sandbox exited before envd was ready (%v): %w", last, errdefs.ErrUnavailable)
		case <-ctx.Done():
			return fmt.Errorf("envd not ready after %s (%v): %w", c.ReadyTimeout, last, errdefs.ErrUnavailable)
		case <-time.After(delay):
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}

// FromEnvd gives an answer of envd (a kind from errhttp.ToNative or
// errconnect.ToNative) the kind the orchestrator reports. Kinds that blame
// envd's caller (a bad request, token or user) blame the orchestrator,
// which made the request, not the API client: ErrInternal. envd being
// busy, out of disk or unreachable keeps its kind.
func FromEnvd(err error) error {
	for _, k := range []error{errdefs.ErrUnavailable, errdefs.ErrResourceExhausted, errdefs.ErrNoSpace,
		errdefs.ErrNotImplemented, errdefs.ErrInternal, context.DeadlineExceeded, context.Canceled} {
		if errors.Is(err, k) {
			return err
		}
	}
	// Only the text: the caller-blaming kind must not reach errhttp.
	return fmt.Errorf("%v: %w", err, errdefs.ErrInternal)
}

// exited is closed when sandbox id's process ends before ctx does (the
// runtime's Wait); the goroutine waiting for it ends with ctx.
func (c *Client) exited(ctx context.Context, id string) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		if _, err := c.Waiter.Wait(ctx, id); ctx.Err() == nil && !errdefs.IsNotFound(err) {
			close(ch)
		}
	}()
	return ch
}

// MergeEnv is base with over's variables added or replacing base's.
func MergeEnv(base, over map[string]string) map[string]string {
	if len(base) == 0 {
		return over
	}
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}
