package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// Node is one `moat serve` that runs sandboxes, as it registered itself
// in the node registry that the servers sharing a store read (the cluster
// issue: API servers place sandboxes on nodes by it). A node is alive
// while LeaseUntil is ahead; a server that finds it behind marks the node
// Lost (MarkLostNodes), and the node must register again.
type Node struct {
	ID         string // chosen by the node (moat serve --node-id; default the host name)
	Addr       string // where servers reach its node API (host:port)
	Runtimes   []string
	MemoryMB   int // memory it offers sandboxes
	CPUs       int
	Version    string
	StartedAt  time.Time
	LeaseUntil time.Time
	Lost       bool
	// Warm are the templates it has a ready warm pool member of, as it
	// last said (SetNodeWarm; a lease renewal apart at most).
	Warm []string
}

const nodeCols = `id, addr, runtimes, memory_mb, cpus, version, started_at, lease_until, lost, warm`

// RegisterNode inserts n, or replaces the node with n.ID (also one marked
// lost: it is alive again); errdefs.ErrInvalidArgument without an ID or a
// lease.
func (d *DB) RegisterNode(ctx context.Context, n Node) error {
	if n.ID == "" || n.LeaseUntil.IsZero() {
		return fmt.Errorf("register node %q: ID and lease required: %w", n.ID, errInvalid)
	}
	rts, err := json.Marshal(nonNilStrings(n.Runtimes))
	if err != nil {
		return fmt.Errorf("register node %s: %w", n.ID, err)
	}
	warm, err := json.Marshal(nonNilStrings(n.Warm))
	if err != nil {
		return fmt.Errorf("register node %s: %w", n.ID, err)
	}
	_, err = d.w.ExecContext(ctx, `INSERT INTO nodes (`+nodeCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)
		ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, runtimes = excluded.runtimes,
		memory_mb = excluded.memory_mb, cpus = excluded.cpus, version = excluded.version,
		started_at = excluded.started_at, lease_until = excluded.lease_until, lost = 0, warm = excluded.warm`,
		n.ID, n.Addr, string(rts), n.MemoryMB, n.CPUs, n.Version, toUnix(n.StartedAt), toUnix(n.LeaseUntil), string(warm))
	if err != nil {
		return fmt.Errorf("register node %s: %w", n.ID, err)
	}
	return nil
}

// RenewNodeLease moves node id's lease to until (never back).
// errdefs.ErrNotFound for an unknown node; errdefs.ErrFailedPrecondition
// for one marked lost, which must register again (and reconcile its
// sandboxes with what the others were told) before it counts as alive.
func (d *DB) RenewNodeLease(ctx context.Context, id string, until time.Time) error {
	res, err := d.w.ExecContext(ctx, `UPDATE nodes SET lease_until = CASE WHEN lease_until > ? THEN lease_until ELSE ? END
		WHERE id = ? AND lost = 0`, toUnix(until), toUnix(until), id)
	if err != nil {
		return fmt.Errorf("renew lease of node %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	if _, err := d.GetNode(ctx, id); err != nil {
		return err
	}
	return fmt.Errorf("renew lease of node %s: the node was declared lost; it must register again: %w", id, errdefs.ErrFailedPrecondition)
}

// SetNodeWarm records the templates node id has a ready warm member of;
// errdefs.ErrNotFound for an unknown node.
func (d *DB) SetNodeWarm(ctx context.Context, id string, warm []string) error {
	b, err := json.Marshal(nonNilStrings(warm))
	if err != nil {
		return fmt.Errorf("warm templates of node %s: %w", id, err)
	}
	res, err := d.w.ExecContext(ctx, `UPDATE nodes SET warm = ? WHERE id = ?`, string(b), id)
	if err != nil {
		return fmt.Errorf("warm templates of node %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("warm templates of node %s: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// GetNode returns node id; errdefs.ErrNotFound if none.
func (d *DB) GetNode(ctx context.Context, id string) (Node, error) {
	n, err := scanNode(d.r.QueryRowContext(ctx, `SELECT `+nodeCols+` FROM nodes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Node{}, notFound("node", id)
	}
	if err != nil {
		return Node{}, fmt.Errorf("get node %s: %w", id, err)
	}
	return n, nil
}

// ListNodes returns every registered node by ID, lost ones included.
func (d *DB) ListNodes(ctx context.Context) ([]Node, error) {
	return queryAll(ctx, d.r, "list nodes", scanNode, `SELECT `+nodeCols+` FROM nodes ORDER BY id`)
}

// MarkLostNodes marks lost every node whose lease ended before now and
// returns their IDs, each once: of several servers that run it at the same
// time, one gets a given node.
func (d *DB) MarkLostNodes(ctx context.Context, now time.Time) ([]string, error) {
	return queryAll(ctx, d.w, "mark lost nodes", func(sc scanner) (string, error) {
		var id string
		return id, sc.Scan(&id)
	}, `UPDATE nodes SET lost = 1 WHERE lost = 0 AND lease_until < ? RETURNING id`, toUnix(now))
}

// DeleteNode forgets node id (it left the cluster); unknown IDs succeed.
func (d *DB) DeleteNode(ctx context.Context, id string) error {
	if _, err := d.w.ExecContext(ctx, `DELETE FROM nodes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete node %s: %w", id, err)
	}
	return nil
}

func scanNode(sc scanner) (Node, error) {
	var n Node
	var rts, warm string
	var started, lease int64
	var lost int
	if err := sc.Scan(&n.ID, &n.Addr, &rts, &n.MemoryMB, &n.CPUs, &n.Version, &started, &lease, &lost, &warm); err != nil {
		return n, err
	}
	n.StartedAt, n.LeaseUntil, n.Lost = fromUnix(started), fromUnix(lease), lost != 0
	if err := json.Unmarshal([]byte(rts), &n.Runtimes); err != nil {
		return n, fmt.Errorf("node %s runtimes: %w", n.ID, err)
	}
	if err := json.Unmarshal([]byte(warm), &n.Warm); err != nil {
		return n, fmt.Errorf("node %s warm templates: %w", n.ID, err)
	}
	return n, nil
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// NodeLoad is a registered node with what its sandboxes hold.
type NodeLoad struct {
	Node
	ReservedMB int // memory of its sandboxes that are not paused
	Sandboxes  int // its sandboxes that are not paused
}

// PlaceSandbox inserts s on the node pick chooses, counting its
// template's spawn, in one write transaction; pick sees every registered
// node with its load. Servers that place at once see each other's
// sandboxes (SQLite's one writer; on PostgreSQL every write transaction
// takes the store's transaction lock first), so a node is never booked
// past what pick allows. pick's error is returned as it is.
func (d *DB) PlaceSandbox(ctx context.Context, s Sandbox, pick func([]NodeLoad) (string, error)) (Sandbox, error) {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return s, fmt.Errorf("place sandbox %s: %w", s.ID, err)
	}
	defer tx.Rollback()
	loads, err := nodeLoads(ctx, tx)
	if err != nil {
		return s, fmt.Errorf("place sandbox %s: %w", s.ID, err)
	}
	if s.NodeID, err = pick(loads); err != nil {
		return s, err
	}
	if err := insertSandbox(ctx, tx, s); err != nil {
		return s, err
	}
	if err := markSpawned(ctx, tx, s.TemplateID, s.StartedAt); err != nil {
		return s, err
	}
	if err := tx.Commit(); err != nil {
		return s, fmt.Errorf("place sandbox %s: %w", s.ID, err)
	}
	return s, nil
}

// NodeLoads returns every registered node with its load, by ID.
func (d *DB) NodeLoads(ctx context.Context) ([]NodeLoad, error) {
	return nodeLoads(ctx, d.r)
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func nodeLoads(ctx context.Context, q querier) ([]NodeLoad, error) {
	// node_loads is kept by triggers on sandboxes (migration 0014): one
	// row per node, however many sandboxes there are.
	rows, err := q.QueryContext(ctx, `SELECT n.id, n.addr, n.runtimes, n.memory_mb, n.cpus, n.version, n.started_at,
		n.lease_until, n.lost, n.warm, COALESCE(l.reserved_mb, 0), COALESCE(l.sandboxes, 0)
		FROM nodes n LEFT JOIN node_loads l ON l.node_id = n.id ORDER BY n.id`)
	if err != nil {
		return nil, fmt.Errorf("node loads: %w", err)
	}
	defer rows.Close()
	var out []NodeLoad
	for rows.Next() {
		var l NodeLoad
		n, err := scanNode(loadScanner{rows, &l})
		if err != nil {
			return nil, fmt.Errorf("node loads: %w", err)
		}
		l.Node = n
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("node loads: %w", err)
	}
	return out, nil
}

// loadScanner scans a node row followed by its load's two columns.
type loadScanner struct {
	rows *sql.Rows
	l    *NodeLoad
}

func (s loadScanner) Scan(dest ...any) error {
	return s.rows.Scan(append(dest, &s.l.ReservedMB, &s.l.Sandboxes)...)
}

// CreateJoinToken stores a join token: its ID, the hex SHA-256 of its
// secret and when it expires. errdefs.ErrAlreadyExists for a taken ID.
func (d *DB) CreateJoinToken(ctx context.Context, id, hash string, created, expires time.Time) error {
	if id == "" || hash == "" || !expires.After(created) {
		return fmt.Errorf("create join token %q: %w", id, errInvalid)
	}
	_, err := d.w.ExecContext(ctx, `INSERT INTO join_tokens (id, hash, created_at, expires_at) VALUES (?, ?, ?, ?)`,
		id, hash, toUnix(created), toUnix(expires))
	if isUniqueViolation(err) {
		return fmt.Errorf("join token %s: %w", id, errAlreadyExists)
	}
	if err != nil {
		return fmt.Errorf("create join token %s: %w", id, err)
	}
	return nil
}

// UseJoinToken marks join token id used by node at now if hash is its
// secret's, it has not expired and was never used: a token admits one
// node, once (of two that race, one wins). Any other case is
// errdefs.ErrPermissionDenied, without saying which.
func (d *DB) UseJoinToken(ctx context.Context, id, hash, node string, now time.Time) error {
	res, err := d.w.ExecContext(ctx, `UPDATE join_tokens SET used_at = ?, used_by = ?
		WHERE id = ? AND hash = ? AND used_at = 0 AND expires_at > ?`, toUnix(now), node, id, hash, toUnix(now))
	if err != nil {
		return fmt.Errorf("use join token: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.Publicf(errdefs.ErrPermissionDenied, "the join token is unknown, expired or used")
	}
	return nil
}

// RecordTemplateCopy records that node holds a checked copy of template
// id's tree with digest (replacing what it held of the template before).
func (d *DB) RecordTemplateCopy(ctx context.Context, id, node, digest string) error {
	if id == "" || node == "" || digest == "" {
		return fmt.Errorf("record template copy %q on %q: %w", id, node, errInvalid)
	}
	_, err := d.w.ExecContext(ctx, `INSERT INTO template_copies (template_id, node_id, digest) VALUES (?, ?, ?)
		ON CONFLICT (template_id, node_id) DO UPDATE SET digest = excluded.digest`, id, node, digest)
	if err != nil {
		return fmt.Errorf("record template copy %s on %s: %w", id, node, err)
	}
	return nil
}

// TemplateHolders are the nodes that recorded a copy of template id with
// digest, by ID.
func (d *DB) TemplateHolders(ctx context.Context, id, digest string) ([]string, error) {
	return queryAll(ctx, d.r, "template holders", func(sc scanner) (string, error) {
		var n string
		return n, sc.Scan(&n)
	}, `SELECT node_id FROM template_copies WHERE template_id = ? AND digest = ? ORDER BY node_id`, id, digest)
}
