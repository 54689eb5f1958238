package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/metrics/metricstest"
	"github.com/moatsh/moat/internal/store"
	moat "github.com/moatsh/moat/sdk/go"
)

// metricsSandboxMiB is the memory of the test's template: what each of its
// sandboxes reserves.
const metricsSandboxMiB = 512

// TestMetrics runs a scripted workload on a real server in scope 9 (beside
// the host's own) and checks the values /metrics reports: three creates,
// a fourth refused by the capacity model (503), envd health checks and a
// request to a closed port through the sandbox proxy, one kill.
func TestMetrics(t *testing.T) {
	rootfs := requireRealServer(t)
	dir := newDataDir(t, rootfs)
	setTemplateMemory(t, dir, metricsSandboxMiB)
	// Room for three sandboxes' memory, not four.
	memTotal := memTotalMiB(t)
	overcommit := 3.5 * metricsSandboxMiB / float64(memTotal)
	s, err := tryStart(t, dir, []string{"--scope", "9", "--metrics-addr", "127.0.0.1:0",
		"--mem-overcommit", strconv.FormatFloat(overcommit, 'g', -1, 64)})
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`metrics listening on (\S+)`).FindStringSubmatch(s.out.String())
	if m == nil {
		t.Fatalf("no metrics listener: %s", s.out.String())
	}
	metricsURL := "http://" + m[1] + "/metrics"
	scrape := func() metricstest.Samples {
		t.Helper()
		got, err := metricstest.Scrape(http.DefaultClient, metricsURL)
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		return got
	}

	var sbs []*moat.Sandbox
	for range 3 {
		sbs = append(sbs, s.createSandbox(t)) // killed at cleanup
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refused, err := s.client().CreateSandbox(ctx, moat.CreateOptions{Template: "base", Timeout: time.Minute})
	var apiErr *moat.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		if err == nil {
			_ = refused.Kill(context.Background())
		}
		t.Fatalf("fourth create = %v, want 503 (capacity)", err)
	}
	// Sandbox traffic: three envd health checks (204) and a request to a
	// port nothing listens on (502 with a JSON body).
	for range 3 {
		if code, _ := proxyGet(t, s.base, sbs[0].ID, 49983); code != http.StatusNoContent {
			t.Fatalf("envd /health through the proxy: %d", code)
		}
	}
	code, body := proxyGet(t, s.base, sbs[0].ID, 8080)
	if code != http.StatusBadGateway {
		t.Fatalf("port 8080 through the proxy: %d %s", code, body)
	}
	if err := sbs[2].Kill(ctx); err != nil {
		t.Fatal(err)
	}

	got := scrape()
	k := metricstest.Key
	const mib = 1 << 20
	for key, want := range map[string]float64{
		k("moat_operation_duration_seconds_count", "operation", "create", "result", "ok"):    3,
		k("moat_operation_duration_seconds_count", "operation", "create", "result", "error"): 1,
		k("moat_operation_duration_seconds_count", "operation", "kill", "result", "ok"):      1,
		k("moat_api_requests_total", "operation", "create", "code", "2xx"):                   3,
		k("moat_api_requests_total", "operation", "create", "code", "5xx"):                   1,
		k("moat_api_requests_total", "operation", "kill", "code", "2xx"):                     1,
		k("moat_admission_refusals_total", "reason", "no_room"):                              1,
		k("moat_admission_refusals_total", "reason", "queue_full"):                           0,
		k("moat_admission_running"):                               0,
		k("moat_admission_waiting"):                               0,
		k("moat_host_reserved_bytes", "resource", "memory"):       2 * metricsSandboxMiB * mib,
		k("moat_webhook_deliveries_total", "result", "delivered"): 0,
		k("moat_sandbox_connect_stalls_total"):                    0, // none since the port guard's fix
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	if v, want := got[k("moat_host_reservable_bytes", "resource", "memory")], float64(int(overcommit*float64(memTotal)))*mib; v != want {
		t.Errorf("reservable memory %v, want %v", v, want)
	}
	running, notRunning := 0.0, 0.0
	for key, v := range got {
		if !strings.HasPrefix(key, "moat_sandboxes{") {
			continue
		}
		if strings.Contains(key, `state="running"`) && strings.Contains(key, `runtime="container"`) {
			running += v
		} else {
			notRunning += v
		}
	}
	if running != 2 || notRunning != 0 {
		t.Errorf("moat_sandboxes: %v running, %v other; want 2 running", running, notRunning)
	}
	// The proxy counts a request when its handler returns, just after
	// the client has its answer.
	other := k("moat_proxy_requests_total", "port", "other", "code", "5xx")
	for start := time.Now(); scrape()[other] < 1; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the proxy's 502 was not counted")
		}
	}
	got = scrape()
	for key, want := range map[string]float64{
		k("moat_proxy_requests_total", "port", "envd", "code", "2xx"): 3,
		other: 1,
		k("moat_proxy_response_bytes_total", "port", "envd"):  0,
		k("moat_proxy_response_bytes_total", "port", "other"): float64(len(body)),
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}

	// The public listener does not serve /metrics.
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("GET /metrics on the API's listener: %s, want it not served", resp.Status)
	}
}

// setTemplateMemory gives the template "base" in dir's store memMiB.
func setTemplateMemory(t *testing.T, dir string, memMiB int) {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, dir+"/moat.db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tpls, err := db.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tpl := range tpls {
		if tpl.Name == "base" {
			tpl.MemoryMB = memMiB
			if err := db.UpsertTemplate(ctx, tpl); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no template base")
}

// memTotalMiB is the host's memory, as admission reads it.
func memTotalMiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^MemTotal:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no MemTotal in /proc/meminfo")
	}
	kb, _ := strconv.Atoi(string(m[1]))
	return kb / 1024
}

// proxyGet sends GET / for sandbox id's port through the server's proxy
// (E2B's headers) and returns the status and body.
func proxyGet(t *testing.T, base, id string, port int) (int, []byte) {
	t.Helper()
	path := "/"
	if port == 49983 {
		path = "/health"
	}
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(port))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
