package metrics

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/orchestrator/warmpool"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/webhook"
)

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboard: every series deploy/grafana/moat.json queries is one the
// registry exports, and every moat_ family is on the dashboard.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/moat.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("deploy/grafana/moat.json: %v", err)
	}
	names := exported(t)
	used := map[string]bool{}
	series := regexp.MustCompile(`\bmoat_[a-z0-9_]+`)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			found := series.FindAllString(tg.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q: %q queries no moat_ series", p.Title, tg.Expr)
			}
			for _, n := range found {
				fam, ok := names[n]
				if !ok {
					t.Errorf("panel %q: %s is not exported", p.Title, n)
				}
				used[fam] = true
			}
		}
	}
	for _, fam := range names {
		if !used[fam] {
			t.Errorf("%s is on no panel", fam)
		}
	}
}

// exported maps the series names a scrape of a fully fed registry has
// (histograms' _bucket, _count and _sum too) to their family's name.
func exported(t *testing.T) map[string]string {
	t.Helper()
	m := New(Config{Sources: Sources{
		Sandboxes: func(context.Context) ([]store.Sandbox, error) {
			return []store.Sandbox{{State: store.StateRunning}}, nil
		},
		Admission:  admission.New(admission.Config{}),
		Pools:      func() []warmpool.Status { return []warmpool.Status{{Template: "base"}} },
		Reserved:   func() admission.Need { return admission.Need{} },
		Limit:      func() (admission.Need, error) { return admission.Need{}, nil },
		Deliveries: func() webhook.DeliveryCounts { return webhook.DeliveryCounts{} },
	}})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", func(http.ResponseWriter, *http.Request) {})
	m.API(mux).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/sandboxes", nil))
	m.Proxy(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range fams {
		n := f.GetName()
		if !strings.HasPrefix(n, "moat_") {
			continue
		}
		out[n] = n
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_count", "_sum"} {
				out[n+s] = n
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d moat_ series gathered: %v", len(out), out)
	}
	return out
}
