package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/sandboxlog"
)

// maxLogLimit bounds a logs request's limit (E2B's v2 maximum).
const maxLogLimit = 1000

// logsV1 is GET /sandboxes/{id}/logs (deprecated in E2B): the entries at
// or after start (unix ms), at most limit (default 1000), oldest first,
// as lines and as structured entries.
func (s *Server) logsV1(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	lq, err := v1Query(q.Get("start"), q.Get("limit"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	es, err := s.logEntries(r, id, lq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := rest.SandboxLogs{Logs: make([]rest.SandboxLog, len(es)), LogEntries: make([]rest.SandboxLogEntry, len(es))}
	for i, e := range es {
		out.Logs[i] = rest.SandboxLog{Timestamp: e.Time, Line: e.Line}
		out.LogEntries[i] = logEntry(e)
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

func v1Query(start, limit string) (sandboxlog.Query, error) {
	var q sandboxlog.Query
	var err error
	if q.Cursor, err = msParam(start, "start"); err != nil {
		return q, err
	}
	q.Limit, err = limitParam(limit)
	return q, err
}

// logsV2 is GET /v2/sandboxes/{id}/logs: cursor (unix ms), limit (0 to
// 1000, default 1000), direction (forward from the cursor, or backward:
// newest first, at or before it), level (the least one) and search (a
// case-sensitive substring of the message, at most 256 bytes).
func (s *Server) logsV2(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	lq, err := v2Query(q.Get("cursor"), q.Get("limit"), q.Get("direction"), q.Get("level"), q.Get("search"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	es, err := s.logEntries(r, id, lq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := rest.SandboxLogsV2Response{Logs: make([]rest.SandboxLogEntry, len(es))}
	for i, e := range es {
		out.Logs[i] = logEntry(e)
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

func v2Query(cursor, limit, direction, level, search string) (sandboxlog.Query, error) {
	var q sandboxlog.Query
	var err error
	if q.Cursor, err = msParam(cursor, "cursor"); err != nil {
		return q, err
	}
	if q.Limit, err = limitParam(limit); err != nil {
		return q, err
	}
	switch direction {
	case "", string(rest.LogsDirectionForward):
	case string(rest.LogsDirectionBackward):
		q.Backward = true
	default:
		return q, errdefs.Publicf(errdefs.ErrInvalidArgument, "direction %q: want forward or backward", direction)
	}
	if level != "" && !sandboxlog.ValidLevel(level) {
		return q, errdefs.Publicf(errdefs.ErrInvalidArgument, "level %q: want debug, info, warn or error", level)
	}
	q.MinLevel = level
	if len(search) > 256 {
		return q, errdefs.Publicf(errdefs.ErrInvalidArgument, "search is at most 256 bytes")
	}
	q.Search = search
	return q, nil
}

// logEntries reads team's sandbox id's log and selects q's entries.
func (s *Server) logEntries(r *http.Request, id string, q sandboxlog.Query) ([]sandboxlog.Entry, error) {
	files, started, err := s.orch.LogFiles(r.Context(), team(r), id)
	if err != nil {
		return nil, err
	}
	es, err := sandboxlog.Read(files, started)
	if err != nil {
		return nil, err
	}
	if q.Limit == 0 {
		return []sandboxlog.Entry{}, nil
	}
	return sandboxlog.Select(es, q), nil
}

func logEntry(e sandboxlog.Entry) rest.SandboxLogEntry {
	f := e.Fields
	if f == nil {
		f = map[string]string{}
	}
	return rest.SandboxLogEntry{Timestamp: e.Time, Level: rest.LogLevel(e.Level), Message: e.Message, Fields: f}
}

// msParam reads a time in unix milliseconds ("" = none).
func msParam(v, name string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "%s must be unix milliseconds, not %q", name, v)
	}
	return time.UnixMilli(n), nil
}

// limitParam reads a logs limit: 0 to maxLogLimit, default maxLogLimit.
func limitParam(v string) (int, error) {
	if v == "" {
		return maxLogLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxLogLimit {
		return 0, errdefs.Publicf(errdefs.ErrInvalidArgument, "limit must be 0 to %d, not %q", maxLogLimit, v)
	}
	return n, nil
}
