// Package listquery parses the query of E2B's sandbox listing (GET
// /v2/sandboxes, and the metadata filter of GET /sandboxes) into a
// store.SandboxFilter: states, metadata, template, start time, order,
// limit, and the page token the server hands out in X-Next-Token.
package listquery

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

const (
	defaultLimit = 100
	maxLimit     = 100
)

// idRE is a sandbox ID, as server.ShortID accepts it.
var idRE = regexp.MustCompile(`^[a-z0-9]+$`)

// ParseMetadataFilter decodes the `metadata` list filter after normal query
// decoding: the SDKs percent-encode each key and value, join them as a query
// string, and send that string as one (again encoded) parameter value.
func ParseMetadataFilter(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	bad := func(why string) error {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid metadata filter: %s", why)
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

// Parse reads a listing's query; errors are ErrInvalidArgument with a
// public message.
func Parse(q url.Values) (store.SandboxFilter, error) {
	bad := func(format string, a ...any) error {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, format, a...)
	}
	f := store.SandboxFilter{Order: "desc", Limit: defaultLimit}
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
		f.Limit = min(max(n, 1), maxLimit)
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

// EncodeToken is the page token that continues a listing in order after
// c: URL-safe base64 of "<RFC3339Nano>__<id>" plus "__asc" for ascending
// listings, as in E2B's infra.
func EncodeToken(c store.Cursor, order string) string {
	s := c.StartedAt.UTC().Format(time.RFC3339Nano) + "__" + c.ID
	if order == "asc" {
		s += "__asc"
	}
	return base64.URLEncoding.EncodeToString([]byte(s))
}

func decodeToken(tok, order string) (store.Cursor, error) {
	bad := errdefs.Publicf(errdefs.ErrInvalidArgument, "Invalid next token")
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
