package runtimeset

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/store"
)

// ApplyEgress hands sb's stored network policy to its backend (sb.Runtime;
// an unknown name means the default). A backend without host-side policy
// can only run sandboxes without allowOut/denyOut: anything else is
// refused (ErrNotImplemented) rather than ignored. For a sandbox made
// ahead (Prelaunched, not yet created) it returns once the policy is
// checked and applies it in the background: that sandbox's network is up
// and lets nothing out, so the request's policy can only open what it
// asks for, and its netlink work (~1 ms) overlaps the sandbox's start;
// Create waits for it and fails if it failed.
func (s *Set) ApplyEgress(ctx context.Context, sb store.Sandbox) error {
	eg, err := egressOf(sb)
	if err != nil {
		return err
	}
	rt, err := s.Named(sb.Runtime)
	if err != nil {
		rt = s.Default()
	}
	es, ok := rt.(EgressSetter)
	if !ok {
		if len(sb.Network.AllowOut)+len(sb.Network.DenyOut)+len(sb.Network.Rules) > 0 {
			return errdefs.Publicf(errdefs.ErrNotImplemented, "the %s runtime cannot enforce network allowOut/denyOut", rt.Name())
		}
		return nil
	}
	apply := func() error {
		if err := es.SetEgress(context.WithoutCancel(ctx), sb.ID, eg); err != nil {
			return fmt.Errorf("sandbox %s: network policy: %w", sb.ID, err)
		}
		return nil
	}
	s.mu.Lock()
	c, ahead := s.ahead[sb.ID]
	if ahead && c == nil {
		c = make(chan error, 1)
		s.ahead[sb.ID] = c
		s.mu.Unlock()
		go func() { c <- apply() }()
		return nil
	}
	s.mu.Unlock()
	return apply()
}

// awaitEgress ends id's time as a sandbox made ahead: it waits for the
// policy ApplyEgress set in the background, if any, and returns its error.
func (s *Set) awaitEgress(id string) error {
	s.mu.Lock()
	c := s.ahead[id]
	delete(s.ahead, id)
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	return <-c
}

// egressOf is the policy the host enforces for sb.
func egressOf(sb store.Sandbox) (netpolicy.Egress, error) {
	allow, deny, canon, _, err := netpolicy.ParseEgress(sb.Network.AllowOut, sb.Network.DenyOut)
	if err != nil {
		return netpolicy.Egress{}, err
	}
	e := netpolicy.Egress{Allow: allow, Deny: deny, Internet: sb.AllowInternet, Domains: netpolicy.Domains(canon), Team: sb.Team}
	for _, r := range sb.Network.Rules {
		if len(r.Headers) > 0 {
			e.Headers = append(e.Headers, netpolicy.HeaderRule{Domain: r.Domain, Headers: r.Headers})
		}
	}
	return e, nil
}
