package moat

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/moatsh/moat/api/rest"
)

// Metric is one resource reading of a sandbox: CPU, memory and disk.
type Metric = rest.SandboxMetric

// Metrics reads sandbox id's resource readings from start to end (unix
// seconds; a zero time leaves that side open), oldest first: those the
// server collected every 5 s (the last 30 minutes) and, while the sandbox
// runs and the range reaches now, one taken now.
func (c *Client) Metrics(ctx context.Context, id string, start, end time.Time) ([]Metric, error) {
	v := url.Values{}
	if !start.IsZero() {
		v.Set("start", strconv.FormatInt(start.Unix(), 10))
	}
	if !end.IsZero() {
		v.Set("end", strconv.FormatInt(end.Unix(), 10))
	}
	path := "/sandboxes/" + url.PathEscape(id) + "/metrics"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out []Metric
	if err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK, &out); err != nil {
		return nil, err
	}
	return out, nil
}
