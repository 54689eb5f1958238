package moat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/moatsh/moat/api/rest"
)

// DefaultAPIURL is used when neither MOAT_API_URL nor E2B_API_URL is set.
const DefaultAPIURL = "http://127.0.0.1:3000"

// Client talks to a Moat server. The zero value is not usable; create one
// with NewClient and adjust its fields before first use.
type Client struct {
	APIURL     string       // REST API base URL
	SandboxURL string       // base URL of the sandbox proxy (envd); "" = APIURL
	APIKey     string       // sent as X-API-Key
	HTTPClient *http.Client // nil = http.DefaultClient
}

// NewClient returns a client configured from the environment:
// MOAT_API_URL or E2B_API_URL (default DefaultAPIURL), MOAT_SANDBOX_URL or
// E2B_SANDBOX_URL (default: the API URL), MOAT_API_KEY or E2B_API_KEY.
func NewClient() *Client {
	api := firstEnv("MOAT_API_URL", "E2B_API_URL")
	if api == "" {
		api = DefaultAPIURL
	}
	return &Client{
		APIURL:     api,
		SandboxURL: firstEnv("MOAT_SANDBOX_URL", "E2B_SANDBOX_URL"),
		APIKey:     firstEnv("MOAT_API_KEY", "E2B_API_KEY"),
	}
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

func (c *Client) httpClient() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return http.DefaultClient
}

func (c *Client) sandboxURL() string {
	if c.SandboxURL != "" {
		return strings.TrimRight(c.SandboxURL, "/")
	}
	return strings.TrimRight(c.APIURL, "/")
}

// do sends a JSON request to the API. in (if not nil) is the body; out (if
// not nil) receives the decoded answer. Statuses other than want are errors
// (*APIError).
func (c *Client) do(ctx context.Context, method, path string, in any, want int, out any) error {
	_, _, err := c.call(ctx, method, path, in, out, want)
	return err
}

// call is do for answers with several success statuses (want) or headers
// the caller needs: it returns the status and headers of a successful
// answer.
func (c *Client) call(ctx context.Context, method, path string, in, out any, want ...int) (int, http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.APIURL, "/")+path, body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("X-API-Key", c.APIKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "moat-go-sdk")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w: %w", method, path, ErrUnavailable, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if !slices.Contains(want, resp.StatusCode) {
		if resp.StatusCode/100 == 2 {
			return 0, nil, fmt.Errorf("%s %s: unexpected status %d (want %v): %w", method, path, resp.StatusCode, want, ErrInternal)
		}
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, parseAPIError(resp.StatusCode, b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return 0, nil, fmt.Errorf("%s %s: decode answer: %w: %w", method, path, ErrInternal, err)
		}
	}
	return resp.StatusCode, resp.Header, nil
}

// CreateOptions configure a new sandbox.
type CreateOptions struct {
	Template string            // template ID or name, or snapshot ID or name; "" = "base"
	Timeout  time.Duration     // time to live; 0 = 5 minutes (E2B SDK default)
	Metadata map[string]string // free-form labels, returned by List
	EnvVars  map[string]string // environment of every process in the sandbox

	// AutoPause pauses the sandbox when its timeout expires instead of
	// killing it; Connect resumes it.
	AutoPause bool
	// AutoResume resumes an auto-paused sandbox when traffic reaches it
	// through the sandbox proxy. It requires AutoPause.
	AutoResume bool
	// AutoPauseFilesOnly makes the auto-pause keep only the files (E2B's
	// onTimeout keepMemory: false; see PauseFilesOnly). It requires
	// AutoPause and excludes AutoResume.
	AutoPauseFilesOnly bool
}

// DefaultTemplate and DefaultTimeout apply when CreateOptions leaves them empty.
const (
	DefaultTemplate = "base"
	DefaultTimeout  = 300 * time.Second
)

// fromSandbox is the SandboxInfo of a create's or connect's answer (E2B's
// Sandbox: IDs and the envd version).
func fromSandbox(s rest.Sandbox) SandboxInfo {
	return SandboxInfo{ID: s.SandboxID, TemplateID: s.TemplateID, Alias: deref(s.Alias), EnvdVersion: s.EnvdVersion}
}

// fromDetail is the SandboxInfo of GET /sandboxes/{id}.
func fromDetail(s rest.SandboxDetail) SandboxInfo {
	return SandboxInfo{ID: s.SandboxID, TemplateID: s.TemplateID, Alias: deref(s.Alias), EnvdVersion: s.EnvdVersion,
		StartedAt: s.StartedAt, EndAt: s.EndAt, State: string(s.State), CPUCount: int(s.CpuCount),
		MemoryMB: int(s.MemoryMB), DiskSizeMB: int(s.DiskSizeMB), Metadata: metadata(s.Metadata)}
}

// fromListed is the SandboxInfo of one entry of GET /sandboxes.
func fromListed(s rest.ListedSandbox) SandboxInfo {
	return SandboxInfo{ID: s.SandboxID, TemplateID: s.TemplateID, Alias: deref(s.Alias), EnvdVersion: s.EnvdVersion,
		StartedAt: s.StartedAt, EndAt: s.EndAt, State: string(s.State), CPUCount: int(s.CpuCount),
		MemoryMB: int(s.MemoryMB), DiskSizeMB: int(s.DiskSizeMB), Metadata: metadata(s.Metadata)}
}

func metadata(m *rest.SandboxMetadata) map[string]string {
	if m == nil {
		return nil
	}
	return *m
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (c *Client) sandbox(info SandboxInfo, accessToken *string) *Sandbox {
	return &Sandbox{ID: info.ID, Info: info, AccessToken: deref(accessToken), client: c}
}

// CreateSandbox starts a sandbox (POST /sandboxes, secure: envd requires the
// returned access token). opts.Template may name a snapshot (CreateSnapshot),
// which starts a new sandbox from the snapshotted state. The caller should
// Kill it when done; otherwise it dies (or, with AutoPause, pauses) when its
// timeout expires.
func (c *Client) CreateSandbox(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	if opts.Template == "" {
		opts.Template = DefaultTemplate
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Timeout < time.Second {
		return nil, fmt.Errorf("create sandbox: timeout %s below 1s: %w", opts.Timeout, ErrInvalidArgument)
	}
	if opts.AutoResume && !opts.AutoPause {
		return nil, fmt.Errorf("create sandbox: AutoResume requires AutoPause: %w", ErrInvalidArgument)
	}
	if opts.AutoPauseFilesOnly && (!opts.AutoPause || opts.AutoResume) {
		return nil, fmt.Errorf("create sandbox: AutoPauseFilesOnly requires AutoPause and excludes AutoResume "+
			"(a sandbox without its memory is resumed only explicitly): %w", ErrInvalidArgument)
	}
	secure, timeout := true, int32(opts.Timeout/time.Second)
	in := rest.NewSandbox{TemplateID: opts.Template, Timeout: &timeout, Secure: &secure}
	if opts.Metadata != nil {
		md := rest.SandboxMetadata(opts.Metadata)
		in.Metadata = &md
	}
	if opts.EnvVars != nil {
		env := rest.EnvVars(opts.EnvVars)
		in.EnvVars = &env
	}
	if opts.AutoPause {
		in.AutoPause = &opts.AutoPause
	}
	if opts.AutoResume {
		in.AutoResume = &rest.SandboxAutoResumeConfig{Enabled: true}
	}
	if opts.AutoPauseFilesOnly {
		keep := false
		in.AutoPauseMemory = &keep
	}
	var out rest.Sandbox
	if err := c.do(ctx, http.MethodPost, "/sandboxes", in, http.StatusCreated, &out); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	if out.SandboxID == "" {
		return nil, fmt.Errorf("create sandbox: answer without sandboxID: %w", ErrInternal)
	}
	return c.sandbox(fromSandbox(out), out.EnvdAccessToken), nil
}

// GetSandbox returns a running or paused sandbox (GET /sandboxes/{id});
// ErrNotFound when it does not exist.
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	var out rest.SandboxDetail
	if err := c.do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, http.StatusOK, &out); err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return c.sandbox(fromDetail(out), out.EnvdAccessToken), nil
}

// ListSandboxes returns the running sandboxes (GET /sandboxes); paused
// ones are not listed.
func (c *Client) ListSandboxes(ctx context.Context) ([]SandboxInfo, error) {
	var out []rest.ListedSandbox
	if err := c.do(ctx, http.MethodGet, "/sandboxes", nil, http.StatusOK, &out); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	infos := make([]SandboxInfo, len(out))
	for i, s := range out {
		infos[i] = fromListed(s)
	}
	return infos, nil
}

// Kill destroys a sandbox (DELETE /sandboxes/{id}); ErrNotFound when it
// does not exist (any more).
func (c *Client) Kill(ctx context.Context, id string) error {
	if err := c.do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, http.StatusNoContent, nil); err != nil {
		return fmt.Errorf("kill sandbox %s: %w", id, err)
	}
	return nil
}

// SetTimeout makes the sandbox expire d from now (POST /sandboxes/{id}/timeout).
func (c *Client) SetTimeout(ctx context.Context, id string, d time.Duration) error {
	in := rest.SandboxTimeoutRequest{Timeout: int32(d / time.Second)}
	if err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/timeout", in, http.StatusNoContent, nil); err != nil {
		return fmt.Errorf("set timeout of sandbox %s: %w", id, err)
	}
	return nil
}

// Pause suspends a running sandbox (POST /sandboxes/{id}/pause): its memory
// and files are kept until Connect resumes it (or Kill). ErrConflict
// when the sandbox is not running (already paused, or still starting),
// ErrNotFound when it does not exist.
func (c *Client) Pause(ctx context.Context, id string) error {
	if err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", nil, http.StatusNoContent, nil); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	return nil
}

// PauseFilesOnly pauses a running sandbox keeping only its files (E2B's
// pause with keepMemory: false): its processes end and its memory is
// freed; Connect boots it again from its disk (traffic does not). Errors
// as for Pause.
func (c *Client) PauseFilesOnly(ctx context.Context, id string) error {
	keep := false
	in := rest.SandboxPauseRequest{Memory: &keep}
	if err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", in, http.StatusNoContent, nil); err != nil {
		return fmt.Errorf("pause sandbox %s to its files: %w", id, err)
	}
	return nil
}

// Connect makes sure a sandbox runs and expires no sooner than timeout from
// now (POST /v2/sandboxes/{id}/connect): a paused sandbox is resumed
// (resumed is true), a running one only has its timeout extended (never
// shortened). timeout 0 means DefaultTimeout. ErrNotFound when the sandbox does not exist (any more).
func (c *Client) Connect(ctx context.Context, id string, timeout time.Duration) (sb *Sandbox, resumed bool, err error) {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout < time.Second {
		return nil, false, fmt.Errorf("connect sandbox %s: timeout %s below 1s: %w", id, timeout, ErrInvalidArgument)
	}
	in := rest.ConnectSandbox{Timeout: int32(timeout / time.Second)}
	var out rest.Sandbox
	status, _, err := c.call(ctx, http.MethodPost, "/v2/sandboxes/"+url.PathEscape(id)+"/connect", in, &out,
		http.StatusOK, http.StatusCreated)
	if err != nil {
		return nil, false, fmt.Errorf("connect sandbox %s: %w", id, err)
	}
	if out.SandboxID == "" {
		return nil, false, fmt.Errorf("connect sandbox %s: answer without sandboxID: %w", id, ErrInternal)
	}
	info := fromSandbox(out)
	info.State = "running"
	return c.sandbox(info, out.EnvdAccessToken), status == http.StatusCreated, nil
}

// PoolInfo is one of the server's warm pools (moat serve --pool).
type PoolInfo struct {
	Template string `json:"template"`
	Size     int    `json:"size"`  // members it keeps
	Ready    int    `json:"ready"` // members ready now
}

// ListPools lists the server's warm pools (GET /moat/pools, a Moat
// extension).
func (c *Client) ListPools(ctx context.Context) ([]PoolInfo, error) {
	var out []rest.MoatPool
	if err := c.do(ctx, http.MethodGet, "/moat/pools", nil, http.StatusOK, &out); err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	pools := make([]PoolInfo, len(out))
	for i, p := range out {
		pools[i] = PoolInfo{Template: p.Template, Size: p.Size, Ready: p.Ready}
	}
	return pools, nil
}
