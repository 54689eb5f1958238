package server

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/store"
)

const (
	defaultListLimit = 100
	maxListLimit     = 100
)

// ParseMetadataFilter decodes the `metadata` list filter after normal query
// decoding: the SDKs percent-encode each key and value, join them as a query
// string, and send that string as one (again encoded) parameter value.
func ParseMetadataFilter(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("invalid metadata filter: %s: %w", why, errdefs.ErrInvalidArgument)
	}
	whole, err := url.QueryUnescape(raw)
	if err != nil {
		return nil, bad("bad escape")
	}
	out := map[string]string{}
	for _, pair := range strings.Split(whole, "&") {
		parts := strings.Split(pair, "=")
		if len(parts) != 2 {
			return nil, bad(fmt.Sprintf("%q is not key=value", pair))
		}
		k, err := url.QueryUnescape(parts[0])
		if err != nil {
			return nil, bad("bad escape in key")
		}
		v, err := url.QueryUnescape(parts[1])
		if err != nil {
			return nil, bad("bad escape in value")
		}
		if k == "" {
			return nil, bad("empty key")
		}
		out[k] = v
	}
	return out, nil
}

// listV1 is the deprecated list: running sandboxes only, no paging.
func (s *Server) listV1(w http.ResponseWriter, r *http.Request) {
	md, err := ParseMetadataFilter(r.URL.Query().Get("metadata"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows, err := s.orch.List(r.Context(), team(r), store.SandboxFilter{States: []string{store.StateRunning}, Metadata: md})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeListed(w, rows)
}

func (s *Server) listV2(w http.ResponseWriter, r *http.Request) {
	f, err := parseListQuery(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit := f.Limit
	f.Limit = limit + 1
	rows, err := s.orch.List(r.Context(), team(r), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[len(rows)-1]
		w.Header().Set("X-Next-Token", encodeToken(store.Cursor{StartedAt: last.StartedAt, ID: last.ID}, f.Order))
	}
	if wantsRunning(f.States) {
		rf := f
		rf.States, rf.Cursor, rf.Limit = []string{store.StateRunning, store.StateResuming}, nil, 0
		running, err := s.orch.List(r.Context(), team(r), rf)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		w.Header().Set("X-Total-Running", strconv.Itoa(len(running)))
	}
	writeListed(w, rows)
}

func writeListed(w http.ResponseWriter, rows []store.Sandbox) {
	out := make([]listedJSON, 0, len(rows))
	for _, sb := range rows {
		out = append(out, toListed(sb))
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

func wantsRunning(states []string) bool {
	for _, s := range states {
		if s == store.StateRunning {
			return true
		}
	}
	return false
}

func parseListQuery(q url.Values) (store.SandboxFilter, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf(format+": %w", append(a, errdefs.ErrInvalidArgument)...)
	}
	f := store.SandboxFilter{Order: "desc", Limit: defaultListLimit}
	md, err := ParseMetadataFilter(q.Get("metadata"))
	if err != nil {
		return f, err
	}
	f.Metadata = md
	states := []string{"running", "paused"}
	if v := q.Get("state"); v != "" {
		states = strings.Split(v, ",")
	}
	for _, st := range states {
		switch st {
		case "running":
			f.States = append(f.States, store.StateRunning, store.StateResuming)
		case "paused":
			f.States = append(f.States, store.StatePaused, store.StatePausing)
		default:
			return f, bad("invalid state %q (want running or paused)", st)
		}
	}
	if v := q.Get("order"); v != "" {
		if v != "asc" && v != "desc" {
			return f, bad("invalid order %q (want asc or desc)", v)
		}
		f.Order = v
	}
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return f, bad("invalid startedAfter %q (want RFC 3339)", v)
		}
		f.StartedAfter = t
	}
	if v := q.Get("template"); v != "" {
		if strings.Contains(v, ":") {
			return f, bad("template filter cannot contain a tag")
		}
		f.Template = v
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return f, bad("invalid limit %q", v)
		}
		f.Limit = min(max(n, 1), maxListLimit)
	}
	if v := q.Get("nextToken"); v != "" {
		c, err := decodeToken(v, f.Order)
		if err != nil {
			return f, err
		}
		f.Cursor = &c
	}
	return f, nil
}

// Page tokens: URL-safe base64 of "<RFC3339Nano>__<id>" plus "__asc" for
// ascending listings, as in E2B's infra.
func encodeToken(c store.Cursor, order string) string {
	s := c.StartedAt.UTC().Format(time.RFC3339Nano) + "__" + c.ID
	if order == "asc" {
		s += "__asc"
	}
	return base64.URLEncoding.EncodeToString([]byte(s))
}

func decodeToken(tok, order string) (store.Cursor, error) {
	bad := fmt.Errorf("Invalid next token: %w", errdefs.ErrInvalidArgument)
	raw, err := base64.URLEncoding.DecodeString(tok)
	if err != nil {
		return store.Cursor{}, bad
	}
	parts := strings.Split(string(raw), "__")
	asc := len(parts) == 3 && parts[2] == "asc"
	if (len(parts) != 2 && !asc) || asc != (order == "asc") {
		return store.Cursor{}, bad
	}
	t, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil || !idRE.MatchString(parts[1]) {
		return store.Cursor{}, bad
	}
	return store.Cursor{StartedAt: t, ID: parts[1]}, nil
}
