package moat

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/moatsh/moat/api/rest"
)

// SnapshotInfo describes a snapshot: a sandbox's memory and files frozen at
// one moment. New sandboxes start from it when CreateOptions.Template is
// its ID or one of its names.
type SnapshotInfo struct {
	ID        string    `json:"snapshotID"`          // "snap..."; also usable as a template ID
	Names     []string  `json:"names,omitempty"`     // the optional name given at creation; empty when none
	SandboxID string    `json:"sandboxID,omitempty"` // sandbox it was taken from
	CreatedAt time.Time `json:"createdAt"`           // zero when the server did not say
}

func fromSnapshot(s rest.SnapshotInfo) SnapshotInfo {
	info := SnapshotInfo{ID: s.SnapshotID, Names: s.Names, SandboxID: deref(s.SandboxID)}
	if s.CreatedAt != nil {
		info.CreatedAt = *s.CreatedAt
	}
	return info
}

// CreateSnapshot snapshots a running sandbox, which keeps running (POST
// /sandboxes/{id}/snapshots). name is optional ("" = none); names are
// letters, digits and -_./: and may be used instead of the ID as a template.
// ErrNotImplemented when the server's runtime cannot snapshot (containers),
// ErrConflict when the sandbox is not running or the name is taken,
// ErrNotFound when the sandbox does not exist.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID, name string) (SnapshotInfo, error) {
	var in rest.SandboxSnapshotRequest
	if name != "" {
		in.Name = &name
	}
	var out rest.SnapshotInfo
	if err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/snapshots", in, http.StatusCreated, &out); err != nil {
		return SnapshotInfo{}, fmt.Errorf("snapshot sandbox %s: %w", sandboxID, err)
	}
	if out.SnapshotID == "" {
		return SnapshotInfo{}, fmt.Errorf("snapshot sandbox %s: answer without snapshotID: %w", sandboxID, ErrInternal)
	}
	return fromSnapshot(out), nil
}

// maxSnapshotPages bounds ListSnapshots against a server that never stops
// answering a next token.
const maxSnapshotPages = 10000

// ListSnapshots returns the snapshots, newest first (GET /snapshots),
// following the X-Next-Token pages. sandboxID "" lists those of every
// sandbox; otherwise only the ones taken from that sandbox.
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string) ([]SnapshotInfo, error) {
	var infos []SnapshotInfo
	token := ""
	for range maxSnapshotPages {
		q := url.Values{}
		if sandboxID != "" {
			q.Set("sandboxID", sandboxID)
		}
		if token != "" {
			q.Set("nextToken", token)
		}
		path := "/snapshots"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		var out []rest.SnapshotInfo
		_, h, err := c.call(ctx, http.MethodGet, path, nil, &out, http.StatusOK)
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		for _, s := range out {
			infos = append(infos, fromSnapshot(s))
		}
		next := h.Get("X-Next-Token")
		if next == "" {
			return infos, nil
		}
		if next == token || len(out) == 0 {
			return nil, fmt.Errorf("list snapshots: next token %q does not advance: %w", next, ErrInternal)
		}
		token = next
	}
	return nil, fmt.Errorf("list snapshots: more than %d pages: %w", maxSnapshotPages, ErrInternal)
}

// DeleteSnapshot deletes a snapshot by ID or name (DELETE /templates/{id},
// as the E2B SDKs do); sandboxes started from it keep running. ErrNotFound
// when it does not exist.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	if err := c.do(ctx, http.MethodDelete, "/templates/"+url.PathEscape(id), nil, http.StatusNoContent, nil); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}
