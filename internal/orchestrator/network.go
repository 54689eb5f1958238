package orchestrator

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/store"
)

// EgressSetter is implemented by runtimes whose sandboxes have a host-side
// network policy (netpolicy.Manager.SetEgress): it replaces a sandbox's
// egress policy at once when its network exists, else it is applied when
// the network is set up (create, resume), before the sandbox's first packet.
type EgressSetter interface {
	SetEgress(ctx context.Context, id string, e netpolicy.Egress) error
}

// egressOf is the policy the host enforces for sb.
func egressOf(sb store.Sandbox) (netpolicy.Egress, error) {
	allow, deny, canon, _, err := netpolicy.ParseEgress(sb.Network.AllowOut, sb.Network.DenyOut)
	if err != nil {
		return netpolicy.Egress{}, err
	}
	return netpolicy.Egress{Allow: allow, Deny: deny, Internet: sb.AllowInternet, Domains: netpolicy.Domains(canon)}, nil
}

// CanonicalNetwork validates allowOut/denyOut and returns them in canonical
// form (see netpolicy.ParseEgress). Errors are ErrInvalidArgument.
func CanonicalNetwork(allowOut, denyOut []string) (allow, deny []string, err error) {
	_, _, allow, deny, err = netpolicy.ParseEgress(allowOut, denyOut)
	return allow, deny, err
}

// applyEgress hands sb's policy to the runtime. A runtime without host-side
// policy can only run sandboxes without allowOut/denyOut: anything else is
// refused rather than ignored.
func (o *Orchestrator) applyEgress(ctx context.Context, sb store.Sandbox) error {
	eg, err := egressOf(sb)
	if err != nil {
		return err
	}
	rt, es, ok := o.egressSetter(sb.Runtime)
	if !ok {
		if len(sb.Network.AllowOut)+len(sb.Network.DenyOut) > 0 {
			return fmt.Errorf("the %s runtime cannot enforce network allowOut/denyOut: %w", rt.Name(), errdefs.ErrNotImplemented)
		}
		return nil
	}
	if err := es.SetEgress(context.WithoutCancel(ctx), sb.ID, eg); err != nil {
		return fmt.Errorf("sandbox %s: network policy: %w", sb.ID, err)
	}
	return nil
}

// NetworkUpdate is a PUT /sandboxes/{id}/network: it replaces allowOut and
// denyOut (omitted = cleared, as in E2B) and, when AllowInternet is set,
// allow_internet_access (omitted = unchanged: clearing it would mean its
// default, true, which would open a sandbox created without internet).
type NetworkUpdate struct {
	AllowOut      []string
	DenyOut       []string
	AllowInternet *bool
}

// UpdateNetwork replaces the egress policy of one of team's running or
// paused sandboxes. The host applies it before this returns (a paused
// sandbox whose network is down gets it when it resumes); connections to
// destinations that stay allowed are not interrupted.
func (o *Orchestrator) UpdateNetwork(ctx context.Context, team, id string, u NetworkUpdate) (store.Sandbox, error) {
	allow, deny, err := CanonicalNetwork(u.AllowOut, u.DenyOut)
	if err != nil {
		return store.Sandbox{}, err
	}
	e, err := o.entryFor(team, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer e.op.Unlock()
	old := o.snapshot(e)
	if old.State != store.StateRunning && old.State != store.StatePaused {
		return old, fmt.Errorf("sandbox %s is %s: %w", id, old.State, errdefs.ErrConflict)
	}
	sb := old
	sb.Network.AllowOut, sb.Network.DenyOut = allow, deny
	if u.AllowInternet != nil {
		sb.AllowInternet = *u.AllowInternet
	}
	if err := o.applyEgress(ctx, sb); err != nil {
		return old, err
	}
	if err := o.commit(ctx, e, sb); err != nil {
		if rerr := o.applyEgress(ctx, old); rerr != nil {
			o.log.Error("restore network policy after a failed update", "sandboxID", id, "err", rerr)
		}
		return old, err
	}
	o.log.Info("sandbox network policy updated", "sandboxID", id, "allowOut", allow, "denyOut", deny,
		"internet", sb.AllowInternet)
	return sb, nil
}
