package app

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/events"
)

// hookReceiver is a webhook endpoint that answers 503 until up, checks
// each delivery's signature and keeps the events it accepted.
type hookReceiver struct {
	t        *testing.T
	mu       sync.Mutex
	up       bool
	refused  int
	got      []events.Event
	accepted chan struct{}
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.up {
		h.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if got, want := r.Header.Get("e2b-signature"), events.Signature("whsec", body); got != want {
		h.t.Errorf("e2b-signature %q, want %q", got, want)
	}
	var ev events.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		h.t.Errorf("delivery %q: %v", body, err)
	}
	h.got = append(h.got, ev)
	h.accepted <- struct{}{}
}

// TestWebhooksSurviveOutageAndRestart: a receiver that is down for 30 s,
// across a restart of the server, gets every event of a sandbox's life
// afterwards, each signed, in order.
func TestWebhooksSurviveOutageAndRestart(t *testing.T) {
	rt, dir := fakeRuntimeWithBase(t, "apptest-hooks")
	recv := &hookReceiver{t: t, accepted: make(chan struct{}, 16)}
	rs := httptest.NewServer(recv)
	defer rs.Close()
	cfg := Config{DataDir: dir, EnvdPort: rt.EnvdPort, Runtime: "apptest-hooks",
		WebhookAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	base, stdout, stop := startWith(t, cfg)
	key := regexp.MustCompile(`Created API key: (e2b_[0-9a-f]{40})`).FindStringSubmatch(stdout.String())[1]
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("X-API-KEY", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b.Bytes(), want)
		}
		return b.Bytes()
	}
	call("POST", "/events/webhooks", `{"name":"t","url":"`+rs.URL+`/hook","events":["sandbox.lifecycle.created",`+
		`"sandbox.lifecycle.updated","sandbox.lifecycle.paused","sandbox.lifecycle.resumed","sandbox.lifecycle.killed"],`+
		`"signatureSecret":"whsec"}`, 201)
	down := time.Now()
	var sb struct{ SandboxID string }
	json.Unmarshal(call("POST", "/v2/sandboxes", `{"templateID":"base"}`, 201), &sb)
	p := "/sandboxes/" + sb.SandboxID
	call("POST", p+"/timeout", `{"timeout":120}`, 204)
	call("POST", p+"/pause", ``, 204)
	call("POST", p+"/resume", `{"timeout":60}`, 201)
	call("DELETE", p, ``, 204)
	// the first attempts fail; the server stops with everything queued
	for {
		recv.mu.Lock()
		refused := recv.refused
		recv.mu.Unlock()
		if refused >= 5 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	base, _, stop = startWith(t, cfg)
	defer stop()
	time.Sleep(30*time.Second - time.Since(down)) // the receiver's outage: 30 s in all
	recv.mu.Lock()
	recv.up = true
	recv.mu.Unlock()
	want := []string{events.Created, events.Updated, events.Paused, events.Resumed, events.Killed}
	for range want {
		select {
		case <-recv.accepted:
		case <-time.After(2 * time.Minute):
			t.Fatalf("after the outage the receiver got %d of %d events", len(recv.got), len(want))
		}
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for i, ev := range recv.got {
		if ev.Type != want[i] || ev.SandboxID != sb.SandboxID {
			t.Errorf("delivery %d: %s of %s, want %s", i, ev.Type, ev.SandboxID, want[i])
		}
	}
	// the events API still lists them after the restart
	var listed []events.Event
	json.Unmarshal(call("GET", "/events/sandboxes/"+sb.SandboxID+"?orderAsc=true", "", 200), &listed)
	if len(listed) != len(want) || listed[0].ID != recv.got[0].ID {
		t.Errorf("listed after restart: %d events", len(listed))
	}
}
