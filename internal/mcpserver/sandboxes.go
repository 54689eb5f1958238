package mcpserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	moat "github.com/moatsh/moat/sdk/go"
)

// maxSandboxTimeout bounds create_sandbox's timeout (the Moat server may
// bound it further: moat serve --max-timeout).
const maxSandboxTimeout = 24 * time.Hour

type createIn struct {
	Template       string            `json:"template,omitempty" jsonschema:"template ID or name, or snapshot ID or name (default \"base\"; \"code-interpreter-v1\" for run_code)"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"seconds until the sandbox is killed (default 300, at most 86400)"`
	EnvVars        map[string]string `json:"env_vars,omitempty" jsonschema:"environment variables of every process in the sandbox"`
	Metadata       map[string]string `json:"metadata,omitempty" jsonschema:"free-form labels, returned by list_sandboxes"`
}

type sandboxOut struct {
	SandboxID  string            `json:"sandbox_id"`
	Template   string            `json:"template,omitempty"`
	State      string            `json:"state,omitempty"`
	StartedAt  string            `json:"started_at,omitempty"`
	ExpiresAt  string            `json:"expires_at,omitempty"`
	CPUCount   int               `json:"cpu_count,omitempty"`
	MemoryMB   int               `json:"memory_mb,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	EnvdVer    string            `json:"envd_version,omitempty"`
	TemplateID string            `json:"template_id,omitempty"`
}

func fromInfo(i moat.SandboxInfo) sandboxOut {
	o := sandboxOut{SandboxID: i.ID, Template: i.Alias, TemplateID: i.TemplateID, State: i.State,
		CPUCount: i.CPUCount, MemoryMB: i.MemoryMB, Metadata: i.Metadata, EnvdVer: i.EnvdVersion}
	if o.Template == "" {
		o.Template = i.TemplateID
	}
	if !i.StartedAt.IsZero() {
		o.StartedAt = i.StartedAt.UTC().Format(time.RFC3339)
	}
	if !i.EndAt.IsZero() {
		o.ExpiresAt = i.EndAt.UTC().Format(time.RFC3339)
	}
	return o
}

type listOut struct {
	Sandboxes []sandboxOut `json:"sandboxes"`
	Truncated bool         `json:"truncated,omitempty"`
}

type idIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's ID (from create_sandbox or list_sandboxes)"`
}

type exposeIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's ID"`
	Port      int    `json:"port" jsonschema:"TCP port a server in the sandbox listens on (on 0.0.0.0 or the sandbox's address)"`
}

type exposeOut struct {
	// URL routes by host name ({port}-{id}.{domain}); empty when the Moat
	// server's domain is not configured (moat mcp --domain).
	URL string `json:"url,omitempty"`
	// ProxyURL with Headers routes by header, whatever the domain.
	ProxyURL string            `json:"proxy_url"`
	Headers  map[string]string `json:"headers"`
	// Probe is the outcome of one GET / through the proxy.
	Probe string `json:"probe"`
}

// maxListed bounds list_sandboxes' answer.
const maxListed = 500

func (s *server) addSandboxTools(ms *mcp.Server) {
	yes, no := true, false
	addTool(s, ms, &mcp.Tool{Name: "create_sandbox", Title: "Create a sandbox",
		Description: "Start a new isolated sandbox and return its sandbox_id. Kill it with kill_sandbox when done. " +
			"Use the template \"code-interpreter-v1\" for run_code. Network policies (allow_internet, allow/deny lists) " +
			"are not offered: the Moat Go SDK does not support them yet; sandboxes get the server's default network.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes}}, s.createSandbox)
	addTool(s, ms, &mcp.Tool{Name: "list_sandboxes", Title: "List sandboxes",
		Description: "List the running sandboxes of this API key's team.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, s.listSandboxes)
	addTool(s, ms, &mcp.Tool{Name: "kill_sandbox", Title: "Kill a sandbox",
		Description: "Destroy a sandbox and everything in it.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true}}, s.killSandbox)
	addTool(s, ms, &mcp.Tool{Name: "expose_port", Title: "Expose a sandbox port",
		Description: "Return how to reach an HTTP server listening on a port inside a sandbox: url (by host name, " +
			"when the server has a domain) and proxy_url with headers (always), and probe, the outcome of one GET /.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &yes}}, s.exposePort)
}

func (s *server) createSandbox(ctx context.Context, in createIn) (*mcp.CallToolResult, sandboxOut, error) {
	timeout := time.Duration(in.TimeoutSeconds) * time.Second
	if in.TimeoutSeconds < 0 || timeout > maxSandboxTimeout {
		return nil, sandboxOut{}, fmt.Errorf("timeout_seconds %d: want 1 to %d", in.TimeoutSeconds, int(maxSandboxTimeout/time.Second))
	}
	sb, err := s.cfg.Client.CreateSandbox(ctx, moat.CreateOptions{Template: in.Template, Timeout: timeout,
		EnvVars: in.EnvVars, Metadata: in.Metadata})
	if err != nil {
		return nil, sandboxOut{}, err
	}
	out := fromInfo(sb.Info)
	if out.Template == "" {
		out.Template = in.Template
	}
	if timeout == 0 {
		timeout = moat.DefaultTimeout
	}
	out.State = "running"
	out.ExpiresAt = time.Now().Add(timeout).UTC().Format(time.RFC3339)
	s.log.Info("mcp: sandbox created", "sandboxID", sb.ID, "template", out.Template)
	return textResult(fmt.Sprintf("Created sandbox %s (template %s), killed at %s unless kill_sandbox ends it first.",
		sb.ID, out.Template, out.ExpiresAt)), out, nil
}

func (s *server) listSandboxes(ctx context.Context, _ struct{}) (*mcp.CallToolResult, listOut, error) {
	infos, err := s.cfg.Client.ListSandboxes(ctx)
	if err != nil {
		return nil, listOut{}, err
	}
	out := listOut{Sandboxes: []sandboxOut{}}
	var b strings.Builder
	fmt.Fprintf(&b, "%d running sandbox(es)", len(infos))
	if len(infos) > maxListed {
		infos, out.Truncated = infos[:maxListed], true
		fmt.Fprintf(&b, " (the first %d listed)", maxListed)
	}
	b.WriteString("\n")
	for _, i := range infos {
		o := fromInfo(i)
		out.Sandboxes = append(out.Sandboxes, o)
		fmt.Fprintf(&b, "%s  template=%s  state=%s  expires=%s\n", o.SandboxID, o.Template, o.State, o.ExpiresAt)
	}
	return textResult(truncate(b.String(), s.cfg.MaxOutput)), out, nil
}

func (s *server) killSandbox(ctx context.Context, in idIn) (*mcp.CallToolResult, any, error) {
	if err := checkID(in.SandboxID); err != nil {
		return nil, nil, err
	}
	if err := s.cfg.Client.Kill(ctx, in.SandboxID); err != nil {
		return nil, nil, err
	}
	s.log.Info("mcp: sandbox killed", "sandboxID", in.SandboxID)
	return textResult("Killed sandbox " + in.SandboxID + "."), nil, nil
}

func (s *server) exposePort(ctx context.Context, in exposeIn) (*mcp.CallToolResult, exposeOut, error) {
	if in.Port < 1 || in.Port > 65535 {
		return nil, exposeOut{}, fmt.Errorf("port %d: want 1 to 65535", in.Port)
	}
	sb, err := s.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, exposeOut{}, err
	}
	base := s.sandboxURL()
	out := exposeOut{ProxyURL: base, Headers: map[string]string{
		"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": strconv.Itoa(in.Port)}}
	if s.cfg.Domain != "" {
		scheme := "https"
		if u, err := url.Parse(base); err == nil && u.Scheme != "" {
			scheme = u.Scheme
		}
		out.URL = fmt.Sprintf("%s://%d-%s.%s", scheme, in.Port, sb.ID, s.cfg.Domain)
	}
	out.Probe = s.probe(ctx, base, out.Headers)
	var b strings.Builder
	if out.URL != "" {
		fmt.Fprintf(&b, "URL: %s\n", out.URL)
	}
	fmt.Fprintf(&b, "Through the proxy by header: curl -H 'E2b-Sandbox-Id: %s' -H 'E2b-Sandbox-Port: %d' %s/\n", sb.ID, in.Port, base)
	fmt.Fprintf(&b, "Probe (GET /): %s", out.Probe)
	return textResult(b.String()), out, nil
}

// probe sends one GET / to the sandbox port and describes the answer.
func (s *server) probe(ctx context.Context, base string, headers map[string]string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	if err != nil {
		return err.Error()
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return "no answer: " + err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == http.StatusBadGateway {
		return "502: nothing answers on that port yet (is the server listening on 0.0.0.0?)"
	}
	return "HTTP " + resp.Status
}

// sandbox looks up a sandbox of the key's team (with its envd token).
func (s *server) sandbox(ctx context.Context, id string) (*moat.Sandbox, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	return s.cfg.Client.GetSandbox(ctx, id)
}

func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("sandbox_id is required")
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("sandbox_id %q: not a sandbox ID", id)
		}
	}
	return nil
}

func (s *server) httpClient() *http.Client {
	if s.cfg.Client.HTTPClient != nil {
		return s.cfg.Client.HTTPClient
	}
	return http.DefaultClient
}

// sandboxURL is the base URL of the Moat server's sandbox proxy.
func (s *server) sandboxURL() string {
	if s.cfg.Client.SandboxURL != "" {
		return strings.TrimRight(s.cfg.Client.SandboxURL, "/")
	}
	return strings.TrimRight(s.cfg.Client.APIURL, "/")
}
