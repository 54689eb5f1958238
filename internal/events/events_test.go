package events

import (
	"encoding/json"
	"testing"
	"time"
)

// TestSignature checks the e2b-signature against a value computed apart
// from this code (Python's hashlib over the secret followed by the body,
// base64 with the padding stripped, as E2B's docs verify it).
func TestSignature(t *testing.T) {
	got := Signature("secret-for-event-signature-verification", []byte(`{"type":"sandbox.lifecycle.created"}`))
	if want := "TWALWb3ijVXg2m3WV/NNGRJ+21DCnhLSmwlw8J578o8"; got != want {
		t.Fatalf("Signature = %q, want %q", got, want)
	}
	if Signature("other", []byte(`{"type":"sandbox.lifecycle.created"}`)) == got {
		t.Fatal("the secret does not change the signature")
	}
}

func TestExecutionID(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	a, b := ExecutionID("sb1", t0), ExecutionID("sb1", t0)
	if a != b {
		t.Fatalf("one run, two IDs: %s %s", a, b)
	}
	for _, other := range []string{ExecutionID("sb1", t0.Add(time.Nanosecond)), ExecutionID("sb2", t0)} {
		if other == a {
			t.Fatalf("another run has the same ID %s", a)
		}
	}
}

// TestJSON checks the fields E2B's docs show, by name, and that an event
// without data says null (as E2B's examples do).
func TestJSON(t *testing.T) {
	at := time.Date(2026, 12, 6, 5, 0, 0, 0, time.FixedZone("x", 3600))
	ev := New(Killed, Sandbox{ID: "sb1", Team: "t", TemplateID: "tpl", BuildID: "b", StartedAt: at.Add(-time.Minute)}, at,
		map[string]any{"execution": Execution(at.Add(-time.Minute), at, 2, 512)})
	b, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"version": "v2", "type": Killed, "eventCategory": "lifecycle", "eventLabel": "kill",
		"sandboxId": "sb1", "sandboxTeamId": "t", "sandboxTemplateId": "tpl", "sandboxBuildId": "b",
		"timestamp": "2026-12-06T04:00:00Z"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	exec := m["eventData"].(map[string]any)["execution"].(map[string]any)
	if exec["execution_time"] != float64(60000) || exec["vcpu_count"] != float64(2) || exec["started_at"] != "2026-12-06T03:59:00Z" {
		t.Errorf("execution = %v", exec)
	}
	b, _ = New(Created, Sandbox{ID: "sb1"}, at, map[string]any{}).Marshal()
	if err := json.Unmarshal(b, &m); err != nil || m["eventData"] != nil {
		t.Errorf("eventData of an event without data = %v (%v), want null", m["eventData"], err)
	}
}

func TestValid(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{{Created, true}, {Checkpointed, true}, {"create", false}, {"", false}, {"sandbox.lifecycle.CREATED", false}} {
		if Valid(tt.in) != tt.want {
			t.Errorf("Valid(%q) = %v", tt.in, !tt.want)
		}
	}
}
