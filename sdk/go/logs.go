package moat

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/moatsh/moat/api/rest"
)

// LogEntry is one line of a sandbox's own log (envd's output; on a
// microVM also the guest's console): time, level, message and fields.
type LogEntry = rest.SandboxLogEntry

// LogQuery selects log entries (E2B's v2 logs): from Cursor on (zero:
// the first), or with Backward newest first at or before Cursor; at least
// Level (debug, info, warn, error; "" = all); whose message contains
// Search; at most Limit (1–1000; 0 means the server's 1000).
type LogQuery struct {
	Cursor   time.Time
	Backward bool
	Level    string
	Search   string
	Limit    int
}

// Logs reads sandbox id's log.
func (c *Client) Logs(ctx context.Context, id string, q LogQuery) ([]LogEntry, error) {
	v := url.Values{}
	if !q.Cursor.IsZero() {
		v.Set("cursor", strconv.FormatInt(q.Cursor.UnixMilli(), 10))
	}
	if q.Backward {
		v.Set("direction", string(rest.LogsDirectionBackward))
	}
	if q.Level != "" {
		v.Set("level", q.Level)
	}
	if q.Search != "" {
		v.Set("search", q.Search)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	path := "/v2/sandboxes/" + url.PathEscape(id) + "/logs"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out rest.SandboxLogsV2Response
	if err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK, &out); err != nil {
		return nil, err
	}
	return out.Logs, nil
}
