package moat

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestMetrics(t *testing.T) {
	var queries []string
	c := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /sandboxes/{id}/metrics": func(w http.ResponseWriter, r *http.Request) {
			if r.PathValue("id") == "gone" {
				writeJSON(w, 404, map[string]any{"code": 404, "message": "sandbox gone not found"})
				return
			}
			queries = append(queries, r.URL.RawQuery)
			writeJSON(w, 200, []map[string]any{{"timestamp": "2026-12-07T06:00:00Z", "timestampUnix": 1796623200,
				"cpuCount": 2, "cpuUsedPct": 12.5, "memUsed": 1, "memTotal": 2, "memCache": 0, "diskUsed": 3, "diskTotal": 4}})
		},
	})
	ctx := context.Background()
	start, end := time.Unix(1796623100, 0), time.Unix(1796623300, 0)
	ms, err := c.Metrics(ctx, "i1", start, end)
	if err != nil || len(ms) != 1 || ms[0].CpuUsedPct != 12.5 || ms[0].DiskTotal != 4 {
		t.Fatalf("Metrics() = %+v, %v", ms, err)
	}
	if _, err := c.Metrics(ctx, "i1", time.Time{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"end=1796623300&start=1796623100", ""}; len(queries) != 2 || queries[0] != want[0] || queries[1] != want[1] {
		t.Fatalf("queries %q, want %q", queries, want)
	}
	var apiErr *APIError
	if _, err := c.Metrics(ctx, "gone", time.Time{}, time.Time{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("Metrics(gone) error = %v", err)
	}
}
