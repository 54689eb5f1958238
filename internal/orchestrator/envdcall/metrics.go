package envdcall

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// Disk reads the used and total bytes of the sandbox's root filesystem
// from envd's GET /metrics; token is the sandbox's envd access token.
func (c *Client) Disk(ctx context.Context, addr netip.Addr, token string) (used, total uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL(addr)+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("envd /metrics: status %d: %w", resp.StatusCode, FromEnvd(errhttp.ToNative(resp.StatusCode)))
	}
	var m struct {
		DiskUsed  uint64 `json:"disk_used"`
		DiskTotal uint64 `json:"disk_total"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&m); err != nil {
		return 0, 0, fmt.Errorf("envd /metrics: %w", err)
	}
	if m.DiskTotal == 0 {
		return 0, 0, fmt.Errorf("envd /metrics: no disk figures")
	}
	return m.DiskUsed, m.DiskTotal, nil
}
