package orchestrator

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// Warm pools (moat serve --pool TEMPLATE=N): N sandboxes of a template are
// kept created, with envd answering, but not handed out. A create of that
// template takes one and only applies what the request carries (network
// policy, envd's /init with env, user and access token, the template's
// start command), so it answers in milliseconds instead of a full start.
//
// A member is never reused: once handed out it is an ordinary sandbox and
// is killed like one. Until then it has no store row (the E2B API never
// lists it; a restart's Recover removes it, as every sandbox the store
// does not know), its network is deny-all, it holds its template's files
// (template GC leaves them) and it counts against the host reservation
// (Reserved). Members of an outdated template version (rebuilt since they
// were made) are killed instead of handed out, and the pool refills with
// the new one. Refills run one at a time per pool through admission
// control, so user requests keep their share of the host.

// PoolSpec asks for Size warm sandboxes of Template (an ID or name of a
// shared template or one of the default team's).
type PoolSpec struct {
	Template string
	Size     int
}

// poolRetry is the pause after a failed refill.
const poolRetry = 5 * time.Second

// poolPoll is how often a full pool checks that its template is unchanged.
const poolPoll = 2 * time.Second

// pool is one template's warm sandboxes.
type pool struct {
	spec   PoolSpec
	wake   chan struct{} // a member was taken: refill
	mu     sync.Mutex
	ready  []*member // guarded by mu
	closed bool      // guarded by mu
}

// member is one warm sandbox.
type member struct {
	spec    runtime.Spec
	addr    runtime.Handle
	tplID   string
	version string // the template's version when it was made
	release func() // lets template GC have its files again
	made    time.Time
}

// PoolStatus describes one pool for operators.
type PoolStatus struct {
	Template string
	Size     int
	Ready    int
	IDs      []string
}

func templateVersion(t store.Template) string {
	return t.ID + "/" + t.BuildID + "/" + t.UpdatedAt.UTC().Format(time.RFC3339Nano)
}

// StartPools runs the configured pools until ctx ends, then kills their
// members. It returns at once; Pools reports on them.
func (o *Orchestrator) StartPools(ctx context.Context) {
	for _, s := range o.cfg.Pools {
		if s.Size <= 0 {
			continue
		}
		p := &pool{spec: s, wake: make(chan struct{}, 1)}
		o.poolMu.Lock()
		o.pools = append(o.pools, p)
		o.poolMu.Unlock()
		o.poolWG.Add(1)
		go func() {
			defer o.poolWG.Done()
			o.runPool(ctx, p)
		}()
	}
}

// WaitPools waits for the pools' goroutines after their context ended
// (their members are killed by then).
func (o *Orchestrator) WaitPools() { o.poolWG.Wait() }

// Pools reports the pools' state, by template.
func (o *Orchestrator) Pools() []PoolStatus {
	o.poolMu.Lock()
	defer o.poolMu.Unlock()
	out := make([]PoolStatus, 0, len(o.pools))
	for _, p := range o.pools {
		p.mu.Lock()
		st := PoolStatus{Template: p.spec.Template, Size: p.spec.Size, Ready: len(p.ready)}
		for _, m := range p.ready {
			st.IDs = append(st.IDs, m.spec.ID)
		}
		p.mu.Unlock()
		sort.Strings(st.IDs)
		out = append(out, st)
	}
	return out
}

// runPool keeps p full until ctx ends.
func (o *Orchestrator) runPool(ctx context.Context, p *pool) {
	log := o.log.With("pool", p.spec.Template)
	defer o.drainPool(p)
	for ctx.Err() == nil {
		tpl, err := o.db.GetTeamTemplate(ctx, store.DefaultTeam, p.spec.Template)
		if err == nil {
			o.dropStale(ctx, p, templateVersion(tpl))
		}
		p.mu.Lock()
		short := p.spec.Size - len(p.ready)
		p.mu.Unlock()
		wait := poolPoll
		switch {
		case err != nil:
			log.Warn("warm pool: template unavailable", "err", err)
			wait = poolRetry
		case short > 0:
			if err := o.addMember(ctx, p, tpl); err != nil {
				if ctx.Err() == nil {
					log.Warn("warm pool: refill failed", "err", err)
				}
				wait = poolRetry
			} else {
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-p.wake:
		case <-time.After(wait):
		}
	}
}

// addMember creates one warm sandbox of tpl and adds it to p.
func (o *Orchestrator) addMember(ctx context.Context, p *pool, tpl store.Template) (retErr error) {
	spec, err := o.spec(tpl, CreateRequest{})
	if err != nil {
		return err
	}
	release := o.holdTemplate(tpl.ID)
	done, err := o.admit(ctx, "pool", admission.Need{MemoryMiB: spec.MemoryMiB, DiskMiB: spec.DiskMiB})
	if err != nil {
		release()
		return err
	}
	defer done()
	defer func() {
		if retErr != nil {
			o.killMember(context.WithoutCancel(ctx), &member{spec: spec, release: release})
		}
	}()
	// Deny-all until a create takes it (applyEgress of the request).
	if err := o.applyEgress(ctx, store.Sandbox{ID: spec.ID, Runtime: spec.Runtime}); err != nil {
		return err
	}
	h, err := o.rt.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("pool %s: create: %w", tpl.Name, err)
	}
	rctx, cancel := context.WithTimeout(ctx, o.cfg.ReadyTimeout)
	defer cancel()
	if err := o.waitHealthy(rctx, spec.ID, h.Addr); err != nil {
		return fmt.Errorf("pool %s: %w", tpl.Name, err)
	}
	o.warmUp(rctx, h.Addr, tpl.ID)
	m := &member{spec: spec, addr: *h, tplID: tpl.ID, version: templateVersion(tpl), release: release, made: time.Now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("pool %s: closed", tpl.Name)
	}
	p.ready = append(p.ready, m)
	o.log.Info("warm pool: member ready", "pool", p.spec.Template, "sandboxID", spec.ID, "ready", len(p.ready))
	return nil
}

// warmUp runs one command through envd the way the SDKs do (`bash -l -c`
// as the template's user), so that a member's first command after the
// hand-out does not pay for the guest's first process start (slow in a
// freshly restored microVM under TCG: its pages fault in one by one). A
// failure (say, an image without bash) only costs that time later.
func (o *Orchestrator) warmUp(ctx context.Context, addr netip.Addr, tplID string) {
	user := "user"
	if tc, err := o.db.TemplateConfigOf(ctx, tplID); err == nil && tc.User != "" {
		user = tc.User
	}
	pc := processconnect.NewProcessClient(o.http, o.envdURL(addr), connect.WithProtoJSON())
	noStdin := false
	in := &process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "true"}},
		Stdin: &noStdin}
	auth := func(h interface{ Set(string, string) }) {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	if _, err := o.runOnce(ctx, pc, in, auth); err != nil {
		o.log.Debug("warm pool: warm-up command", "err", err)
	}
}

// dropStale kills p's members made from another version of the template.
func (o *Orchestrator) dropStale(ctx context.Context, p *pool, version string) {
	p.mu.Lock()
	var stale []*member
	keep := p.ready[:0]
	for _, m := range p.ready {
		if m.version == version {
			keep = append(keep, m)
		} else {
			stale = append(stale, m)
		}
	}
	p.ready = keep
	p.mu.Unlock()
	for _, m := range stale {
		o.log.Info("warm pool: template changed, member dropped", "pool", p.spec.Template, "sandboxID", m.spec.ID)
		o.killMember(ctx, m)
	}
}

// drainPool kills every member of p and closes it.
func (o *Orchestrator) drainPool(p *pool) {
	p.mu.Lock()
	ms := p.ready
	p.ready, p.closed = nil, true
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	for _, m := range ms {
		o.killMember(ctx, m)
	}
}

func (o *Orchestrator) killMember(ctx context.Context, m *member) {
	if err := o.rt.Kill(ctx, m.spec.ID); err != nil {
		o.log.Error("warm pool: kill member", "sandboxID", m.spec.ID, "err", err)
	}
	if m.release != nil {
		m.release()
	}
}

// takeMember removes and returns a member of tpl's current version, or
// nil; rt, when set, is the runtime the create asks for.
func (o *Orchestrator) takeMember(tpl store.Template, rt string) *member {
	version := templateVersion(tpl)
	o.poolMu.Lock()
	pools := append([]*pool(nil), o.pools...)
	o.poolMu.Unlock()
	for _, p := range pools {
		p.mu.Lock()
		for i, m := range p.ready {
			if m.tplID == tpl.ID && m.version == version && (rt == "" || rt == m.spec.Runtime) {
				p.ready = append(p.ready[:i], p.ready[i+1:]...)
				p.mu.Unlock()
				select {
				case p.wake <- struct{}{}:
				default:
				}
				return m
			}
		}
		p.mu.Unlock()
	}
	return nil
}

// poolReserved is what warm members reserve on the host.
func (o *Orchestrator) poolReserved() admission.Need {
	o.poolMu.Lock()
	defer o.poolMu.Unlock()
	var n admission.Need
	for _, p := range o.pools {
		p.mu.Lock()
		for _, m := range p.ready {
			n.MemoryMiB += m.spec.MemoryMiB
			n.DiskMiB += m.spec.DiskMiB
		}
		p.mu.Unlock()
	}
	return n
}

// createPooled hands out a warm member of tpl for req, if a pool has one:
// ok is false when none was taken or the member failed (it is killed, and
// the caller creates a sandbox the ordinary way).
func (o *Orchestrator) createPooled(ctx context.Context, req CreateRequest, tpl store.Template,
	network store.Network) (_ store.Sandbox, ok bool) {
	m := o.takeMember(tpl, req.Metadata[MetadataRuntime])
	if m == nil {
		return store.Sandbox{}, false
	}
	defer m.release()
	sb := o.newSandbox(req, tpl, m.spec, req.EnvVars, network)
	sb.Addr = m.addr.Addr.String()
	log := o.log.With("sandboxID", sb.ID, "template", tpl.Name)
	err := func() error {
		if err := o.applyEgress(ctx, sb); err != nil {
			return err
		}
		tc, err := o.db.TemplateConfigOf(ctx, tpl.ID)
		if err != nil {
			return err
		}
		if err := o.initEnvd(ctx, m.addr.Addr, sb, tc, ""); err != nil {
			return err
		}
		if err := o.startTemplateCmd(ctx, m.addr.Addr, sb, tc, tpl.RootfsDir); err != nil {
			return err
		}
		sb.StartedAt = time.Now().UTC()
		sb.EndAt = sb.StartedAt.Add(req.Timeout)
		return o.db.InsertSandbox(ctx, sb)
	}()
	if err != nil {
		log.Warn("warm pool: hand-out failed; creating anew", "err", err)
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
		defer cancel()
		o.killMember(kctx, &member{spec: m.spec})
		_ = o.db.DeleteSandbox(kctx, sb.ID)
		return store.Sandbox{}, false
	}
	if err := o.db.MarkTemplateSpawned(ctx, tpl.ID, sb.StartedAt); err != nil {
		log.Warn("spawn statistics", "err", err)
	}
	o.mu.Lock()
	o.live[sb.ID] = &entry{sb: sb, addr: m.addr.Addr}
	o.mu.Unlock()
	log.Info("sandbox created from the warm pool", "addr", sb.Addr, "age", time.Since(m.made).Round(time.Millisecond))
	return sb, true
}
