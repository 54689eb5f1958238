package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Series read at scrape time.
var (
	sandboxesDesc = prometheus.NewDesc("moat_sandboxes",
		"Sandboxes this node holds in the store, by state, runtime and template ID.",
		[]string{"state", "runtime", "template"}, nil)
	admRunningDesc = prometheus.NewDesc("moat_admission_running",
		"Heavy operations (creates, resumes, pauses, snapshots, pool refills) running now.", nil, nil)
	admWaitingDesc = prometheus.NewDesc("moat_admission_waiting",
		"Operations waiting in admission's queue now (pool refills included).", nil, nil)
	admRefusedDesc = prometheus.NewDesc("moat_admission_refusals_total",
		"Operations admission refused: queue_full and wait (429), no_room (503).", []string{"reason"}, nil)
	poolSizeDesc = prometheus.NewDesc("moat_pool_size",
		"Warm sandboxes a pool keeps, by template.", []string{"template"}, nil)
	poolReadyDesc = prometheus.NewDesc("moat_pool_ready",
		"Warm sandboxes ready in a pool now, by template.", []string{"template"}, nil)
	reservedDesc = prometheus.NewDesc("moat_host_reserved_bytes",
		"What live sandboxes and warm pools reserve on the host, by resource (memory, disk).", []string{"resource"}, nil)
	reservableDesc = prometheus.NewDesc("moat_host_reservable_bytes",
		"What sandboxes may reserve in all before creates get 503 (overcommit × host size), by resource.",
		[]string{"resource"}, nil)
	deliveriesDesc = prometheus.NewDesc("moat_webhook_deliveries_total",
		"Webhook delivery attempts, by result: delivered, failed (retried later), given_up.", []string{"result"}, nil)
	stallsDesc = prometheus.NewDesc("moat_sandbox_connect_stalls_total",
		"Connects from the host to a sandbox unanswered after 1 s, raced by a second one (package dialrace); "+
			"any is worth a look.", nil, nil)
)

// scrapeTimeout bounds the store read of one scrape.
const scrapeTimeout = 5 * time.Second

// mib is a MiB in bytes.
const mib = 1 << 20

// collector reads Sources at scrape time.
type collector struct {
	src Sources
	log *slog.Logger
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxesDesc, admRunningDesc, admWaitingDesc, admRefusedDesc,
		poolSizeDesc, poolReadyDesc, reservedDesc, reservableDesc, deliveriesDesc, stallsDesc} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.sandboxes(ch)
	if a := c.src.Admission; a != nil {
		s, r := a.Stats(), a.Refusals()
		ch <- prometheus.MustNewConstMetric(admRunningDesc, prometheus.GaugeValue, float64(s.Running))
		ch <- prometheus.MustNewConstMetric(admWaitingDesc, prometheus.GaugeValue, float64(s.Waiting))
		counter(ch, admRefusedDesc, r.QueueFull, "queue_full")
		counter(ch, admRefusedDesc, r.Wait, "wait")
		counter(ch, admRefusedDesc, r.Room, "no_room")
	}
	if c.src.Pools != nil {
		for _, p := range c.src.Pools() {
			ch <- prometheus.MustNewConstMetric(poolSizeDesc, prometheus.GaugeValue, float64(p.Size), p.Template)
			ch <- prometheus.MustNewConstMetric(poolReadyDesc, prometheus.GaugeValue, float64(p.Ready), p.Template)
		}
	}
	if c.src.Reserved != nil {
		n := c.src.Reserved()
		ch <- prometheus.MustNewConstMetric(reservedDesc, prometheus.GaugeValue, float64(n.MemoryMiB)*mib, "memory")
		ch <- prometheus.MustNewConstMetric(reservedDesc, prometheus.GaugeValue, float64(n.DiskMiB)*mib, "disk")
	}
	if c.src.Limit != nil {
		if n, err := c.src.Limit(); err != nil {
			c.log.Warn("metrics: host capacity", "err", err)
		} else {
			ch <- prometheus.MustNewConstMetric(reservableDesc, prometheus.GaugeValue, float64(n.MemoryMiB)*mib, "memory")
			ch <- prometheus.MustNewConstMetric(reservableDesc, prometheus.GaugeValue, float64(n.DiskMiB)*mib, "disk")
		}
	}
	if c.src.Deliveries != nil {
		d := c.src.Deliveries()
		counter(ch, deliveriesDesc, d.Delivered, "delivered")
		counter(ch, deliveriesDesc, d.Failed, "failed")
		counter(ch, deliveriesDesc, d.GivenUp, "given_up")
	}
	if c.src.ConnectStalls != nil {
		ch <- prometheus.MustNewConstMetric(stallsDesc, prometheus.CounterValue, float64(c.src.ConnectStalls()))
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, label string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
}

// sandboxKey is one moat_sandboxes series.
type sandboxKey struct{ state, runtime, template string }

// sandboxes counts this node's rows by state, runtime and template. A
// store error leaves the series out of this scrape (and is logged).
func (c *collector) sandboxes(ch chan<- prometheus.Metric) {
	if c.src.Sandboxes == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	sbs, err := c.src.Sandboxes(ctx)
	if err != nil {
		c.log.Warn("metrics: list sandboxes", "err", err)
		return
	}
	counts := map[sandboxKey]int{}
	for _, s := range sbs {
		counts[sandboxKey{string(s.State), s.Runtime, s.TemplateID}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), k.state, k.runtime, k.template)
	}
}
