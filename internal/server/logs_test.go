package server_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSandboxLogs: both logs routes read the sandbox's own log (envd's
// slog lines structured, other lines kept whole), with E2B's parameters;
// bad parameters are 400, another team's sandbox 404.
func TestSandboxLogs(t *testing.T) {
	h := newHarness(t)
	h.env.Runtime.LogDir = t.TempDir()
	id := h.create(`{"templateID":"base"}`)["sandboxID"].(string)
	log := strings.Join([]string{
		`[    0.100000] guest boot line`,
		`time=2026-12-07T03:00:01.000Z level=INFO msg="envd started" port=49983`,
		`time=2026-12-07T03:00:02.000Z level=DEBUG msg="a debug line"`,
		`time=2026-12-07T03:00:03.000Z level=INFO msg="process started" pid=12 cmd="/bin/bash -l"`,
		`time=2026-12-07T03:00:04.000Z level=ERROR msg="process ended" pid=12 status="exit status 1"`,
	}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(h.env.Runtime.LogDir, id+".log"), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	var v1 struct {
		Logs []struct {
			Timestamp string `json:"timestamp"`
			Line      string `json:"line"`
		} `json:"logs"`
		LogEntries []struct {
			Timestamp, Level, Message string
			Fields                    map[string]string
		} `json:"logEntries"`
	}
	h.do("GET", "/sandboxes/"+id+"/logs", "").json(t, &v1)
	if len(v1.Logs) != 5 || len(v1.LogEntries) != 5 || v1.Logs[0].Line != `[    0.100000] guest boot line` ||
		v1.LogEntries[3].Message != "process started" || v1.LogEntries[3].Fields["cmd"] != "/bin/bash -l" ||
		v1.LogEntries[4].Level != "error" || v1.LogEntries[0].Fields == nil {
		t.Fatalf("v1: %+v", v1)
	}
	start := fmt.Sprint(time.Date(2026, 12, 7, 3, 0, 3, 0, time.UTC).UnixMilli())
	h.do("GET", "/sandboxes/"+id+"/logs?start="+start+"&limit=1", "").json(t, &v1)
	if len(v1.LogEntries) != 1 || v1.LogEntries[0].Message != "process started" {
		t.Fatalf("v1 from start, limit 1: %+v", v1.LogEntries)
	}
	var v2 struct {
		Logs []struct{ Timestamp, Level, Message string } `json:"logs"`
	}
	for _, tc := range []struct {
		query string
		want  string
	}{
		{"", "guest boot line,envd started,a debug line,process started,process ended"},
		{"?level=info", "guest boot line,envd started,process started,process ended"},
		{"?level=warn", "process ended"},
		{"?direction=backward&limit=2", "process ended,process started"},
		{"?cursor=" + start + "&direction=backward&level=info", "process started,envd started,guest boot line"},
		{"?cursor=" + start, "process started,process ended"},
		{"?search=process", "process started,process ended"},
		{"?limit=0", ""},
	} {
		h.do("GET", "/v2/sandboxes/"+id+"/logs"+tc.query, "").json(t, &v2)
		var got []string
		for _, e := range v2.Logs {
			got = append(got, strings.TrimPrefix(e.Message, "[    0.100000] "))
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("v2%s: %q, want %q", tc.query, strings.Join(got, ","), tc.want)
		}
	}
	for _, q := range []string{"?cursor=x", "?cursor=-1", "?limit=1001", "?limit=-1", "?direction=up", "?level=fatal",
		"?search=" + strings.Repeat("a", 257)} {
		h.do("GET", "/v2/sandboxes/"+id+"/logs"+q, "").errBody(t, http.StatusBadRequest)
	}
	for _, q := range []string{"?start=x", "?limit=y"} {
		h.do("GET", "/sandboxes/"+id+"/logs"+q, "").errBody(t, http.StatusBadRequest)
	}
	keyB := h.keyFor("b")
	if r := h.doKey("GET", "/v2/sandboxes/"+id+"/logs", "", keyB); r.status != http.StatusNotFound {
		t.Errorf("another team's sandbox: %d", r.status)
	}
	// A sandbox whose backend keeps no log: empty, not an error.
	h.env.Runtime.LogDir = ""
	h.do("GET", "/v2/sandboxes/"+id+"/logs", "").json(t, &v2)
	if len(v2.Logs) != 0 {
		t.Errorf("no log: %+v", v2.Logs)
	}
}
