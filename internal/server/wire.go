package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/server/volumeapi"
	"github.com/moatsh/moat/internal/store"
)

// clientID is E2B's deprecated but required constant.
const clientID = "6532622b"

// The request and response bodies are api/rest's types, generated from
// E2B's OpenAPI document. Of NewSandbox / NewSandboxV2 (what the JS and
// Python SDKs send), fields Moat does not implement that change security or
// storage are refused with 400 naming them when set (mcp, iam,
// and in network: see parseNetwork; volumeMounts when the server has no
// volumes). Ignored because
// harmless: fields this server does not know at the top level (newer SDKs' additions; the network object, all
// of whose fields matter, refuses unknown ones).

// apiState maps stored states onto the two the API knows.
func apiState(st store.State) rest.SandboxState {
	switch st {
	case store.StatePaused, store.StatePausing:
		return "paused"
	default:
		return "running"
	}
}

func toSandbox(sb store.Sandbox, envd string) rest.Sandbox {
	return rest.Sandbox{TemplateID: sb.TemplateID, SandboxID: sb.ID, Alias: optional(sb.Alias), ClientID: clientID,
		EnvdVersion: envd, EnvdAccessToken: optional(sb.EnvdAccessToken),
		TrafficAccessToken: optional(sb.Network.TrafficAccessToken)}
}

func toDetail(sb store.Sandbox, envd string) rest.SandboxDetail {
	onTimeout := rest.SandboxOnTimeout("kill")
	if sb.AutoPause {
		onTimeout = "pause"
	}
	inet := sb.AllowInternet
	md := rest.SandboxMetadata(metadataOf(sb))
	return rest.SandboxDetail{TemplateID: sb.TemplateID, Alias: optional(sb.Alias), SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.StartedAt.UTC(), EndAt: sb.EndAt.UTC(), EnvdVersion: envd,
		EnvdAccessToken: optional(sb.EnvdAccessToken), CpuCount: int32(sb.CPUCount), MemoryMB: int32(sb.MemoryMB),
		DiskSizeMB: int32(sb.DiskSizeMB), Metadata: &md, State: apiState(sb.State),
		AllowInternetAccess: &inet, Lifecycle: &rest.SandboxLifecycle{OnTimeout: onTimeout, AutoResume: sb.AutoResume},
		Network: toNetworkOut(sb.Network), VolumeMounts: volumeapi.Wire(sb.VolumeMounts)}
}

func toListed(sb store.Sandbox, envd string) rest.ListedSandbox {
	md := rest.SandboxMetadata(metadataOf(sb))
	return rest.ListedSandbox{TemplateID: sb.TemplateID, Alias: optional(sb.Alias), SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.StartedAt.UTC(), EndAt: sb.EndAt.UTC(), CpuCount: int32(sb.CPUCount), MemoryMB: int32(sb.MemoryMB),
		DiskSizeMB: int32(sb.DiskSizeMB), Metadata: &md, State: apiState(sb.State), EnvdVersion: envd}
}

func toMetric(m orchestrator.Metric) rest.SandboxMetric {
	return rest.SandboxMetric{Timestamp: m.Time, TimestampUnix: m.Time.Unix(), CpuCount: int32(m.CPUCount),
		CpuUsedPct: float32(m.CPUUsedPct), MemUsed: int64(m.MemUsed), MemTotal: int64(m.MemTotal),
		MemCache: int64(m.MemCache), DiskUsed: int64(m.DiskUsed), DiskTotal: int64(m.DiskTotal)}
}

// orDefault is n, or def when n is not set (≤ 0).
func orDefault(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

func toTemplate(t store.Template) rest.Template {
	out := rest.Template{TemplateID: t.ID, BuildID: t.BuildID, CpuCount: int32(t.CPUCount), MemoryMB: int32(t.MemoryMB),
		DiskSizeMB: int32(t.DiskSizeMB), CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, LastSpawnedAt: t.LastSpawnedAt,
		SpawnCount: int64(t.SpawnCount), BuildCount: 1, EnvdVersion: templateEnvd(t), Aliases: []string{t.Name},
		Names: []string{t.Name}, BuildStatus: rest.TemplateBuildStatus(store.BuildReady)}
	out.CpuCount = int32(orDefault(t.CPUCount, orchestrator.DefaultVCPUs))
	out.MemoryMB = int32(orDefault(t.MemoryMB, orchestrator.DefaultMemoryMiB))
	out.DiskSizeMB = int32(orDefault(t.DiskSizeMB, orchestrator.DefaultDiskMiB))
	if out.BuildID == "" {
		out.BuildID = "00000000-0000-0000-0000-000000000000"
	}
	return out
}

// templateEnvd is the version of the envd in t's root filesystem, recorded
// when it was built or imported; templates from before that was recorded
// report this server's.
func templateEnvd(t store.Template) string {
	if t.EnvdVersion == "" {
		return state.Version
	}
	return t.EnvdVersion
}

// envdVersions returns the envd version of a sandbox's template (see
// templateEnvd), looking each template up once per call of envdVersions:
// one request's worth of sandboxes. A template gone since falls back to
// this server's version.
func (s *Server) envdVersions(ctx context.Context) func(templateID string) string {
	seen := map[string]string{}
	return func(templateID string) string {
		if v, ok := seen[templateID]; ok {
			return v
		}
		v := state.Version
		if t, err := s.db.GetTemplate(ctx, templateID); err == nil {
			v = templateEnvd(t)
		}
		seen[templateID] = v
		return v
	}
}

// envdOf is the envd version of sb's template.
func (s *Server) envdOf(ctx context.Context, sb store.Sandbox) string {
	return s.envdVersions(ctx)(sb.TemplateID)
}

// optional is v as an optional field: nil (omitted) when empty.
func optional(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

// metadataOf is sb's metadata as the API shows it: with the sandbox's
// runtime under orchestrator.MetadataRuntime (E2B's sandbox info has no
// runtime field; metadata is what every SDK surfaces).
func metadataOf(sb store.Sandbox) map[string]string {
	out := make(map[string]string, len(sb.Metadata)+1)
	for k, v := range sb.Metadata {
		out[k] = v
	}
	if sb.Runtime != "" {
		out[orchestrator.MetadataRuntime] = sb.Runtime
	}
	return out
}

// resumeRequest is ResumedSandbox with memory, which SDKs that pause
// without memory send: false (cold boot from disk) is refused, since E2B
// says never to downgrade it.
type resumeRequest struct {
	rest.ResumedSandbox
	Memory *bool `json:"memory"`
}

// decodeFields decodes r's JSON body into v like decode and also returns
// its top-level fields as sent: the generated types cannot tell a required
// field that is absent from its zero value, nor an empty object from none.
func decodeFields(r *http.Request, v any, required bool) (map[string]json.RawMessage, error) {
	var raw json.RawMessage
	if err := decode(r, &raw, required); err != nil || len(raw) == 0 {
		return nil, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, bodyError(err)
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(raw, &fields) // v decoded: raw is an object or null
	return fields, nil
}

// present reports whether a field was sent with a value other than null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(bytes.TrimSpace(raw)) != "null"
}

// hasField reports whether the JSON object obj has name set (not null).
func hasField(obj json.RawMessage, name string) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(obj, &fields) != nil {
		return false
	}
	return present(fields[name])
}

// deref is *m, or nil.
func deref[M ~map[string]string](m *M) map[string]string {
	if m == nil {
		return nil
	}
	return *m
}
