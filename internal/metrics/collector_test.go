package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/metrics/metricstest"
	"github.com/moatsh/moat/internal/orchestrator/warmpool"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/webhook"
)

func TestCollector(t *testing.T) {
	adm := admission.New(admission.Config{Concurrency: 1, Queue: -1})
	release, err := adm.Admit(context.Background(), admission.Request{Op: "create", Team: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := adm.Admit(context.Background(), admission.Request{Op: "create", Team: "a"}); err == nil {
		t.Fatal("want a queue_full refusal")
	}
	m := New(Config{Sources: Sources{
		Sandboxes: func(context.Context) ([]store.Sandbox, error) {
			return []store.Sandbox{
				{State: store.StateRunning, Runtime: "container", TemplateID: "base"},
				{State: store.StateRunning, Runtime: "container", TemplateID: "base"},
				{State: store.StatePaused, Runtime: "vm", TemplateID: "base"},
			}, nil
		},
		Admission:     adm,
		Pools:         func() []warmpool.Status { return []warmpool.Status{{Template: "base", Size: 3, Ready: 2}} },
		Reserved:      func() admission.Need { return admission.Need{MemoryMiB: 512, DiskMiB: 1024} },
		Limit:         func() (admission.Need, error) { return admission.Need{MemoryMiB: 4096, DiskMiB: 8192}, nil },
		Deliveries:    func() webhook.DeliveryCounts { return webhook.DeliveryCounts{Delivered: 5, Failed: 2} },
		ConnectStalls: func() uint64 { return 3 },
	}})
	s := scrape(t, m)
	k := metricstest.Key
	for key, want := range map[string]float64{
		k("moat_sandboxes", "state", "running", "runtime", "container", "template", "base"): 2,
		k("moat_sandboxes", "state", "paused", "runtime", "vm", "template", "base"):         1,
		k("moat_admission_running"):                                1,
		k("moat_admission_waiting"):                                0,
		k("moat_admission_refusals_total", "reason", "queue_full"): 1,
		k("moat_admission_refusals_total", "reason", "wait"):       0,
		k("moat_admission_refusals_total", "reason", "no_room"):    0,
		k("moat_pool_size", "template", "base"):                    3,
		k("moat_pool_ready", "template", "base"):                   2,
		k("moat_host_reserved_bytes", "resource", "memory"):        512 << 20,
		k("moat_host_reserved_bytes", "resource", "disk"):          1024 << 20,
		k("moat_host_reservable_bytes", "resource", "memory"):      4096 << 20,
		k("moat_host_reservable_bytes", "resource", "disk"):        8192 << 20,
		k("moat_webhook_deliveries_total", "result", "delivered"):  5,
		k("moat_webhook_deliveries_total", "result", "failed"):     2,
		k("moat_webhook_deliveries_total", "result", "given_up"):   0,
		k("moat_sandbox_connect_stalls_total"):                     3,
	} {
		if got, ok := s[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
}

// TestCollectorErrors: a source that fails leaves its series out; the
// scrape still answers.
func TestCollectorErrors(t *testing.T) {
	m := New(Config{Sources: Sources{
		Sandboxes: func(context.Context) ([]store.Sandbox, error) { return nil, errors.New("store down") },
		Limit:     func() (admission.Need, error) { return admission.Need{}, errors.New("no /proc") },
	}})
	s := scrape(t, m)
	for key := range s {
		if strings.HasPrefix(key, "moat_sandboxes") || strings.HasPrefix(key, "moat_host_reservable") {
			t.Errorf("series of a failed source: %s", key)
		}
	}
	if _, ok := s["go_goroutines"]; !ok {
		t.Error("the scrape lost the other series")
	}
}
