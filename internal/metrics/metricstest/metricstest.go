// Package metricstest reads a /metrics scrape into values tests can
// compare, so that tests check what a server reports, not only names.
package metricstest

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Samples are a scrape's values keyed by Key: counters, gauges and
// untyped series by their name, histograms by name_count and name_sum.
type Samples map[string]float64

// Key is a series' key in Samples: name{label="value",...}, labels sorted
// by name; the name alone without labels.
func Key(name string, labels ...string) string {
	if len(labels)%2 != 0 {
		panic("metricstest.Key: labels come in name, value pairs")
	}
	var pairs []string
	for i := 0; i < len(labels); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	if len(pairs) == 0 {
		return name
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// Parse reads Prometheus' text format.
func Parse(r io.Reader) (Samples, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := Samples{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName(), l.GetValue())
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[Key(name, labels...)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[Key(name, labels...)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[Key(name+"_count", labels...)] = float64(m.GetHistogram().GetSampleCount())
				out[Key(name+"_sum", labels...)] = m.GetHistogram().GetSampleSum()
			default:
				out[Key(name, labels...)] = m.GetUntyped().GetValue()
			}
		}
	}
	return out, nil
}

// Scrape GETs url and parses the answer.
func Scrape(c *http.Client, url string) (Samples, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return Parse(resp.Body)
}
