package orchestrator

import (
	"context"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/store"
)

// CanonicalNetwork validates allowOut/denyOut and returns them in canonical
// form (see netpolicy.ParseEgress). Errors are ErrInvalidArgument.
func CanonicalNetwork(allowOut, denyOut []string) (allow, deny []string, err error) {
	_, _, allow, deny, err = netpolicy.ParseEgress(allowOut, denyOut)
	return allow, deny, err
}

// applyEgress hands sb's policy to its runtime (see
// runtimeset.Set.ApplyEgress).
func (o *Orchestrator) applyEgress(ctx context.Context, sb store.Sandbox) error {
	return o.rts.ApplyEgress(ctx, sb)
}

// NetworkUpdate is a PUT /sandboxes/{id}/network: it replaces allowOut and
// denyOut (omitted = cleared, as in E2B) and, when AllowInternet is set,
// allow_internet_access (omitted = unchanged: clearing it would mean its
// default, true, which would open a sandbox created without internet).
// Rules replace network.rules (validated; omitted = cleared).
type NetworkUpdate struct {
	AllowOut      []string
	DenyOut       []string
	AllowInternet *bool
	Rules         []store.NetworkRule
}

// UpdateNetwork replaces the egress policy of one of team's running or
// paused sandboxes. The host applies it before this returns (a paused
// sandbox whose network is down gets it when it resumes); connections to
// destinations that stay allowed are not interrupted. A running sandbox
// that gets header rules trusts the egress CA before they apply.
func (o *Orchestrator) UpdateNetwork(ctx context.Context, team, id string, u NetworkUpdate) (store.Sandbox, error) {
	allow, deny, err := CanonicalNetwork(u.AllowOut, u.DenyOut)
	if err != nil {
		return store.Sandbox{}, err
	}
	e, err := o.live.Lock(team, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer e.Op.Unlock()
	old := o.live.Sandbox(e)
	if old.State != store.StateRunning && old.State != store.StatePaused {
		return old, errdefs.Publicf(errdefs.ErrConflict, "sandbox %s is %s", id, old.State)
	}
	sb := old
	sb.Network.AllowOut, sb.Network.DenyOut, sb.Network.Rules = allow, deny, u.Rules
	if u.AllowInternet != nil {
		sb.AllowInternet = *u.AllowInternet
	}
	if err := o.envd.TrustEgressCA(ctx, sb); err != nil {
		return old, err
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
	o.emit(ctx, events.Updated, sb, withMetadata(map[string]any{"network": map[string]any{
		"allowOut": allow, "denyOut": deny, "allowInternetAccess": sb.AllowInternet}}, sb))
	o.log.Info("sandbox network policy updated", "sandboxID", id, "allowOut", allow, "denyOut", deny,
		"internet", sb.AllowInternet)
	return sb, nil
}
