package clustersim

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/sandboxid"
	"github.com/moatsh/moat/internal/store"
)

// NodeStore is what a simulated node does to the shared store on a
// create: what a real node's API and orchestrator do, minus the runtime.
type NodeStore interface {
	CheckAPIKey(ctx context.Context, key string) (team string, ok bool, err error)
	GetTemplate(ctx context.Context, idOrName string) (store.Template, error)
	InsertSpawnedSandbox(ctx context.Context, s store.Sandbox) error
}

// Node is a simulated node: the node API's create, answered without a
// runtime. It checks the API key and resolves the template in the store
// (as the real API and orchestrator do), admits the sandbox only while
// its memory fits under capacityMB (a real node's admission: 503 when the
// host has no room, so the front door tries the next node), and records
// the sandbox's row with its node ID in the same transaction that counts
// the template's spawn (store.InsertSpawnedSandbox, the orchestrator's
// one commit). It is never added to the runtime registry: it exists only
// behind its listener.
type Node struct {
	ID         string
	Store      NodeStore
	CapacityMB int // the memory it hands out: MemoryMB × overcommit

	mu       sync.Mutex
	reserved int
	srv      *http.Server
	addr     string
}

// createBody is the part of a create request the node reads.
type createBody struct {
	TemplateID string `json:"templateID"`
	Timeout    int    `json:"timeout"`
}

// createAnswer is E2B's create answer, the fields a client reads.
type createAnswer struct {
	SandboxID   string `json:"sandboxID"`
	TemplateID  string `json:"templateID"`
	Alias       string `json:"alias,omitempty"`
	ClientID    string `json:"clientID"`
	EnvdVersion string `json:"envdVersion"`
}

func (n *Node) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || (r.URL.Path != "/sandboxes" && r.URL.Path != "/v2/sandboxes") {
		errhttp.WriteError(w, errdefs.Publicf(errdefs.ErrNotFound, "the simulated node answers creates only"))
		return
	}
	sb, err := n.create(r)
	if err != nil {
		errhttp.WriteError(w, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusCreated, createAnswer{SandboxID: sb.ID, TemplateID: sb.TemplateID,
		Alias: sb.Alias, ClientID: n.ID, EnvdVersion: "0.0.0-clustersim"})
}

// create is the create's store work and admission; its errors carry the
// API's kinds (401, 400, 404, 503).
func (n *Node) create(r *http.Request) (store.Sandbox, error) {
	ctx := r.Context()
	team, ok, err := n.Store.CheckAPIKey(ctx, r.Header.Get("X-API-KEY"))
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("node %s: %w", n.ID, err)
	}
	if !ok {
		return store.Sandbox{}, errdefs.Public(errdefs.ErrUnauthenticated, "Invalid API key")
	}
	var req createBody
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.TemplateID == "" {
		return store.Sandbox{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "a create names its templateID")
	}
	tpl, err := n.Store.GetTemplate(ctx, req.TemplateID)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("node %s: %w", n.ID, err)
	}
	if !n.admit(tpl.MemoryMB) {
		return store.Sandbox{}, errdefs.Publicf(errdefs.ErrUnavailable, "node %s has no room for a sandbox of %d MiB", n.ID, tpl.MemoryMB)
	}
	timeout := 300 * time.Second
	if req.Timeout > 0 {
		timeout = time.Duration(req.Timeout) * time.Second
	}
	now := time.Now().UTC()
	sb := store.Sandbox{ID: sandboxid.New(), Team: team, TemplateID: tpl.ID, Alias: tpl.Name, State: store.StateRunning,
		Runtime: "container", StartedAt: now, EndAt: now.Add(timeout), Timeout: timeout, CPUCount: tpl.CPUCount,
		MemoryMB: tpl.MemoryMB, DiskSizeMB: tpl.DiskSizeMB, NodeID: n.ID}
	if err := n.Store.InsertSpawnedSandbox(ctx, sb); err != nil {
		n.release(tpl.MemoryMB)
		return store.Sandbox{}, fmt.Errorf("node %s: %w", n.ID, err)
	}
	return sb, nil
}

// admit reserves mb if it fits under the node's capacity.
func (n *Node) admit(mb int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.reserved+mb > n.CapacityMB {
		return false
	}
	n.reserved += mb
	return true
}

func (n *Node) release(mb int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reserved -= mb
}

// Reserved is the memory the node handed out.
func (n *Node) Reserved() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reserved
}

// Serve serves the node on a new loopback listener with tc (the node
// API's mutual TLS) and returns its address.
func (n *Node) Serve(tc *tls.Config) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("node %s: %w", n.ID, err)
	}
	n.addr = ln.Addr().String()
	n.srv = &http.Server{Handler: n, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: quietLog()}
	go func() {
		if err := n.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.srv.ErrorLog.Printf("node %s: %v", n.ID, err)
		}
	}()
	return n.addr, nil
}

// Close stops the node's listener and its connections.
func (n *Node) Close() {
	if n.srv != nil {
		n.srv.Close()
	}
}
