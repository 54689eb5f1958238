package server

import (
	"encoding/json"
	"time"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/store"
)

// clientID is E2B's deprecated but required constant.
const clientID = "6532622b"

// newSandbox is NewSandbox / NewSandboxV2 (what the JS and Python SDKs
// send). Fields Moat does not implement that change security or storage
// are refused with 400 naming them when set (mcp, iam, volumeMounts, and
// in network: see networkJSON). Ignored because harmless: autoPauseMemory
// (a pause always keeps memory, which loses nothing a filesystem-only
// pause would keep) and fields this server does not know at the top level
// (newer SDKs' additions; the network object, all of whose fields matter,
// refuses unknown ones).
type newSandbox struct {
	TemplateID          *string           `json:"templateID"`
	Timeout             *int32            `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoResume          *autoResumeJSON   `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Network             json.RawMessage   `json:"network"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
}

type autoResumeJSON struct {
	Enabled *bool `json:"enabled"`
}

type timeoutBody struct {
	Timeout *int32 `json:"timeout"`
}

type refreshBody struct {
	Duration *int32 `json:"duration"`
}

type resumeBody struct {
	Timeout   *int32 `json:"timeout"`
	AutoPause *bool  `json:"autoPause"`
	Memory    *bool  `json:"memory"` // false (cold boot from disk) is refused: E2B says never downgrade it
}

type pauseBody struct {
	Memory *bool `json:"memory"`
}

// sandboxJSON is Sandbox (create/connect/resume).
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

type lifecycleJSON struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// detailJSON is SandboxDetail; listed is the ListedSandbox subset.
type detailJSON struct {
	TemplateID          string            `json:"templateID"`
	Alias               string            `json:"alias,omitempty"`
	SandboxID           string            `json:"sandboxID"`
	ClientID            string            `json:"clientID"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	EnvdVersion         string            `json:"envdVersion"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	Domain              *string           `json:"domain"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int               `json:"memoryMB"`
	DiskSizeMB          int               `json:"diskSizeMB"`
	Metadata            map[string]string `json:"metadata"`
	State               string            `json:"state"`
	AllowInternetAccess *bool             `json:"allowInternetAccess"`
	Lifecycle           *lifecycleJSON    `json:"lifecycle,omitempty"`
	Network             *networkOut       `json:"network,omitempty"`
}

type listedJSON struct {
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
}

type metricJSON struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       uint64    `json:"memUsed"`
	MemTotal      uint64    `json:"memTotal"`
	MemCache      uint64    `json:"memCache"`
	DiskUsed      uint64    `json:"diskUsed"`
	DiskTotal     uint64    `json:"diskTotal"`
}

type templateJSON struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int        `json:"memoryMB"`
	DiskSizeMB    int        `json:"diskSizeMB"`
	Public        bool       `json:"public"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *struct{}  `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int        `json:"spawnCount"`
	BuildCount    int        `json:"buildCount"`
	EnvdVersion   string     `json:"envdVersion"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	BuildStatus   string     `json:"buildStatus"`
}

// apiState maps stored states onto the two the API knows.
func apiState(st string) string {
	switch st {
	case store.StatePaused, store.StatePausing:
		return "paused"
	default:
		return "running"
	}
}

func toSandbox(sb store.Sandbox) sandboxJSON {
	out := sandboxJSON{TemplateID: sb.TemplateID, SandboxID: sb.ID, Alias: sb.Alias, ClientID: clientID,
		EnvdVersion: state.Version, EnvdAccessToken: sb.EnvdAccessToken}
	if tok := sb.Network.TrafficAccessToken; tok != "" {
		out.TrafficAccessToken = &tok
	}
	return out
}

func toDetail(sb store.Sandbox) detailJSON {
	onTimeout := "kill"
	if sb.AutoPause {
		onTimeout = "pause"
	}
	inet := sb.AllowInternet
	return detailJSON{TemplateID: sb.TemplateID, Alias: sb.Alias, SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.StartedAt.UTC(), EndAt: sb.EndAt.UTC(), EnvdVersion: state.Version,
		EnvdAccessToken: sb.EnvdAccessToken, CPUCount: sb.CPUCount, MemoryMB: sb.MemoryMB,
		DiskSizeMB: sb.DiskSizeMB, Metadata: metadataOf(sb), State: apiState(sb.State),
		AllowInternetAccess: &inet, Lifecycle: &lifecycleJSON{OnTimeout: onTimeout, AutoResume: sb.AutoResume},
		Network: toNetworkOut(sb.Network)}
}

func toListed(sb store.Sandbox) listedJSON {
	return listedJSON{TemplateID: sb.TemplateID, Alias: sb.Alias, SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.StartedAt.UTC(), EndAt: sb.EndAt.UTC(), CPUCount: sb.CPUCount, MemoryMB: sb.MemoryMB,
		DiskSizeMB: sb.DiskSizeMB, Metadata: metadataOf(sb), State: apiState(sb.State),
		EnvdVersion: state.Version}
}

func toMetric(m orchestrator.Metric) metricJSON {
	return metricJSON{Timestamp: m.Time, TimestampUnix: m.Time.Unix(), CPUCount: m.CPUCount,
		CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache,
		DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal}
}

func toTemplate(t store.Template) templateJSON {
	out := templateJSON{TemplateID: t.ID, BuildID: t.BuildID, CPUCount: t.CPUCount, MemoryMB: t.MemoryMB,
		DiskSizeMB: t.DiskSizeMB, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, LastSpawnedAt: t.LastSpawnedAt,
		SpawnCount: t.SpawnCount, BuildCount: 1, EnvdVersion: t.EnvdVersion, Aliases: []string{t.Name},
		Names: []string{t.Name}, BuildStatus: "ready"}
	if out.CPUCount <= 0 {
		out.CPUCount = orchestrator.DefaultVCPUs
	}
	if out.MemoryMB <= 0 {
		out.MemoryMB = orchestrator.DefaultMemoryMiB
	}
	if out.DiskSizeMB <= 0 {
		out.DiskSizeMB = orchestrator.DefaultDiskMiB
	}
	if out.EnvdVersion == "" {
		out.EnvdVersion = state.Version
	}
	if out.BuildID == "" {
		out.BuildID = "00000000-0000-0000-0000-000000000000"
	}
	return out
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

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
