// Package events is the sandbox lifecycle events of E2B's events API and
// webhooks: their types, their JSON (the same bytes the API lists and a
// webhook receives), and the e2b-signature a delivery carries. The
// orchestrator makes events, the store keeps them (and the webhook outbox),
// package webhook delivers them.
package events

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// The event types E2B documents (the `type` field, and a webhook's `events`).
const (
	Created      = "sandbox.lifecycle.created"
	Killed       = "sandbox.lifecycle.killed"
	Updated      = "sandbox.lifecycle.updated"
	Paused       = "sandbox.lifecycle.paused"
	Resumed      = "sandbox.lifecycle.resumed"
	Checkpointed = "sandbox.lifecycle.checkpointed"
)

// Types is every event type, in E2B's order.
var Types = []string{Created, Killed, Updated, Paused, Resumed, Checkpointed}

// labels are the deprecated eventLabel values of E2B's first event format,
// still sent beside type for readers written against it.
var labels = map[string]string{Created: "create", Killed: "kill", Updated: "update", Paused: "pause",
	Resumed: "resume", Checkpointed: "checkpoint"}

// Valid reports whether t is an event type.
func Valid(t string) bool { return slices.Contains(Types, t) }

// Retention is how long events are kept (E2B's default).
const Retention = 7 * 24 * time.Hour

// Event is one lifecycle event of a sandbox, in E2B's JSON (version v2,
// with the v1 fields eventCategory and eventLabel kept).
type Event struct {
	Version       string         `json:"version"`
	ID            string         `json:"id"`
	Type          string         `json:"type"`
	EventCategory string         `json:"eventCategory"`
	EventLabel    string         `json:"eventLabel"`
	EventData     map[string]any `json:"eventData"`
	BuildID       string         `json:"sandboxBuildId"`
	ExecutionID   string         `json:"sandboxExecutionId"`
	SandboxID     string         `json:"sandboxId"`
	TeamID        string         `json:"sandboxTeamId"`
	TemplateID    string         `json:"sandboxTemplateId"`
	Timestamp     time.Time      `json:"timestamp"`
}

// Sandbox is what an event says of its sandbox.
type Sandbox struct {
	ID, Team, TemplateID, BuildID string
	// StartedAt is when the sandbox's current run started (its create or
	// its last resume): it names the run (ExecutionID).
	StartedAt time.Time
}

// New is an event of type typ about sb at time at, with data (nil for
// none) as its eventData.
func New(typ string, sb Sandbox, at time.Time, data map[string]any) Event {
	if len(data) == 0 {
		data = nil
	}
	return Event{Version: "v2", ID: uuid.NewString(), Type: typ, EventCategory: "lifecycle", EventLabel: labels[typ],
		EventData: data, BuildID: sb.BuildID, ExecutionID: ExecutionID(sb.ID, sb.StartedAt), SandboxID: sb.ID,
		TeamID: sb.Team, TemplateID: sb.TemplateID, Timestamp: at.UTC()}
}

// ExecutionID names one run of a sandbox: the same for every event between
// a create (or resume) and the next pause or kill, new after a resume. It
// is derived from the run's start, so it survives a server restart
// without being stored.
func ExecutionID(id string, startedAt time.Time) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "moat-run/%s/%d", id, startedAt.UnixNano())).String()
}

// Execution is eventData.execution of a killed or paused event: the run
// that ended (E2B's started_at, vcpu_count, memory_mb, execution_time in
// milliseconds).
func Execution(startedAt, ended time.Time, vcpus, memoryMB int) map[string]any {
	return map[string]any{"started_at": startedAt.UTC().Format(time.RFC3339), "vcpu_count": vcpus,
		"memory_mb": memoryMB, "execution_time": ended.Sub(startedAt).Milliseconds()}
}

// Marshal is ev's JSON.
func (ev Event) Marshal() ([]byte, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	return b, nil
}

// Signature is the e2b-signature of a delivery of body signed with
// secret: SHA-256 of the secret followed by the raw body, base64 without
// padding (E2B's documented construction, signature version v1).
func Signature(secret string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(secret))
	h.Write(body)
	return base64.RawStdEncoding.EncodeToString(h.Sum(nil))
}

// SignatureVersion is the e2b-signature-version header's value.
const SignatureVersion = "v1"
