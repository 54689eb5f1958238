package orchestrator

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/orchestrator/warmpool"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// PoolSpec asks for Size warm sandboxes of Template (see package warmpool).
type PoolSpec = warmpool.Spec

// StartPools runs the configured warm pools until ctx ends, then kills
// their members. It returns at once; Pools reports on them.
func (o *Orchestrator) StartPools(ctx context.Context) { o.pools.Start(ctx, o.cfg.Pools) }

// WaitPools waits for the pools' goroutines after their context ended
// (their members are killed by then).
func (o *Orchestrator) WaitPools() { o.pools.Wait() }

// Pools reports the pools' state, by template.
func (o *Orchestrator) Pools() []warmpool.Status { return o.pools.Status() }

// poolSource makes and kills the warm pools' members (warmpool.Source).
type poolSource struct{ o *Orchestrator }

// Template implements warmpool.Source: a shared template or the default team's.
func (s poolSource) Template(ctx context.Context, ref string) (store.Template, error) {
	return s.o.db.GetTeamTemplate(ctx, store.DefaultTeam, ref)
}

// Make implements warmpool.Source: a sandbox of tpl with a deny-all
// network, made through admission control, whose envd answers.
func (s poolSource) Make(ctx context.Context, tpl store.Template) (_ *warmpool.Member, retErr error) {
	o := s.o
	spec, err := o.spec(tpl, CreateRequest{})
	if err != nil {
		return nil, err
	}
	spec.Background = true // yields the CPU to sandboxes in use until handed out
	release := o.live.HoldTemplate(tpl.ID)
	done, err := o.admit(ctx, admission.Request{Op: "pool", Background: true,
		Need: admission.Need{MemoryMiB: spec.MemoryMiB, DiskMiB: spec.DiskMiB}})
	if err != nil {
		release()
		return nil, err
	}
	defer done()
	defer func() {
		if retErr != nil {
			s.Kill(context.WithoutCancel(ctx), &warmpool.Member{Spec: spec, Release: release})
		}
	}()
	// Deny-all until a create takes it (applyEgress of the request).
	if err := o.applyEgress(ctx, store.Sandbox{ID: spec.ID, Runtime: spec.Runtime}); err != nil {
		return nil, err
	}
	h, err := o.rt.Create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("pool %s: create: %w", tpl.Name, err)
	}
	rctx, cancel := context.WithTimeout(ctx, o.cfg.ReadyTimeout)
	defer cancel()
	if err := o.envd.WaitHealthy(rctx, spec.ID, h.Addr); err != nil {
		return nil, fmt.Errorf("pool %s: %w", tpl.Name, err)
	}
	o.warmUp(rctx, h.Addr, spec.ID, tpl.ID)
	return &warmpool.Member{Spec: spec, Handle: *h, TemplateID: tpl.ID, Version: warmpool.Version(tpl),
		Release: release, Made: time.Now()}, nil
}

// Kill implements warmpool.Source.
func (s poolSource) Kill(ctx context.Context, m *warmpool.Member) {
	if err := s.o.rt.Kill(ctx, m.Spec.ID); err != nil {
		s.o.log.Error("warm pool: kill member", "sandboxID", m.Spec.ID, "err", err)
	}
	if m.Release != nil {
		m.Release()
	}
}

// warmUp runs one command through envd as the template's user (see
// envdcall.Client.WarmUp), then posts the /init of the template's own
// values (no access token, no envs of a request): the hand-out's /init
// then finds the guest's clock already set and, on a microVM under TCG,
// envd's /init path already translated (measured: the hand-out's /init
// 17–36 → 4–6 ms, pooled create→first command 56 → 35 ms). The
// hand-out's /init replaces every value.
func (o *Orchestrator) warmUp(ctx context.Context, addr netip.Addr, id, tplID string) {
	tc, err := o.db.TemplateConfigOf(ctx, tplID)
	if err != nil {
		o.log.Debug("warm pool: template config", "err", err)
		return
	}
	user := "user"
	if tc.User != "" {
		user = tc.User
	}
	if err := o.envd.WarmUp(ctx, addr, user); err != nil {
		o.log.Debug("warm pool: warm-up command", "err", err)
	}
	if err := o.envd.Init(ctx, addr, store.Sandbox{ID: id, TemplateID: tplID}, tc, ""); err != nil {
		o.log.Debug("warm pool: warm-up /init", "err", err)
	}
}

// createPooled hands out a warm member of tpl for req, if a pool has one:
// ok is false when none was taken or the member failed (it is killed, and
// the caller creates a sandbox the ordinary way).
func (o *Orchestrator) createPooled(ctx context.Context, req CreateRequest, tpl store.Template,
	network store.Network) (_ store.Sandbox, ok bool) {
	m := o.pools.Take(tpl, req.Metadata[MetadataRuntime])
	if m == nil {
		return store.Sandbox{}, false
	}
	defer m.Release()
	sb := o.newSandbox(req, tpl, m.Spec, req.EnvVars, network)
	sb.Addr = m.Handle.Addr.String()
	log := o.log.With("sandboxID", sb.ID, "template", tpl.Name)
	var steps [4]time.Time // foreground+egress, init, template command, insert
	start := time.Now()
	err := func() error {
		if f, ok := o.rt.(runtime.Foregrounder); ok {
			if err := f.Foreground(ctx, sb.ID); err != nil {
				return err
			}
		}
		if err := o.applyEgress(ctx, sb); err != nil {
			return err
		}
		steps[0] = time.Now()
		tc, err := o.db.TemplateConfigOf(ctx, tpl.ID)
		if err != nil {
			return err
		}
		if err := o.envd.Init(ctx, m.Handle.Addr, sb, tc, ""); err != nil {
			return err
		}
		steps[1] = time.Now()
		if err := o.envd.StartTemplateCmd(ctx, m.Handle.Addr, sb, tc, tpl.RootfsDir); err != nil {
			return err
		}
		steps[2] = time.Now()
		sb.StartedAt = o.clock.Now().UTC()
		sb.EndAt = sb.StartedAt.Add(req.Timeout)
		return o.db.InsertSpawnedSandbox(ctx, sb) // one commit: record and spawn count
	}()
	steps[3] = time.Now()
	if err != nil {
		log.Warn("warm pool: hand-out failed; creating anew", "err", err)
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
		defer cancel()
		poolSource{o}.Kill(kctx, &warmpool.Member{Spec: m.Spec})
		_ = o.db.DeleteSandbox(kctx, sb.ID)
		return store.Sandbox{}, false
	}
	o.add(sb, m.Handle.Addr)
	o.emit(ctx, events.Created, sb, withMetadata(nil, sb))
	log.Info("sandbox created from the warm pool", "addr", sb.Addr, "age", time.Since(m.Made).Round(time.Millisecond),
		"took", steps[3].Sub(start).Round(time.Microsecond), "network", steps[0].Sub(start).Round(time.Microsecond),
		"init", steps[1].Sub(steps[0]).Round(time.Microsecond), "start_cmd", steps[2].Sub(steps[1]).Round(time.Microsecond),
		"insert", steps[3].Sub(steps[2]).Round(time.Microsecond))
	return sb, true
}
