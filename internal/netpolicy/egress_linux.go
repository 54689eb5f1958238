package netpolicy

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/netpolicy/firewall"
)

// SetEgress replaces sandbox id's egress policy. For a sandbox whose
// network exists the change is applied at once, atomically; before Setup
// it is remembered and Setup applies it (its Internet then overrides
// Setup's allowInternet), so a sandbox never runs without its policy.
// Teardown forgets it. Errors: ErrInvalidArgument (bad id), nftables
// failures (the previous policy then stays in force).
func (m *Manager) SetEgress(ctx context.Context, id string, e Egress) error {
	if err := validID(id); err != nil {
		return err
	}
	m.mu.Lock()
	m.egress[id] = e
	_, up := m.alloc.byID[id]
	m.mu.Unlock()
	if !up {
		return nil // Setup applies it, after its own ensureTable
	}
	if err := m.ensureTable(); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	return m.applyEgress(ctx, id, e)
}

// applyEgress writes e for id's interface. Domain rules reach the proxy
// before the redirect starts, and leave it after the redirect stops.
func (m *Manager) applyEgress(ctx context.Context, id string, e Egress) error {
	if e.Internet || firewall.AllowsAny(e.Allow) {
		if err := m.enableForwarding(); err != nil {
			return err
		}
	}
	proxied := len(e.Domains) > 0
	m.mu.Lock()
	slot, up := m.alloc.byID[id]
	var addr netip.Addr
	if up {
		_, addr = m.alloc.addrs(slot)
	}
	m.mu.Unlock()
	if len(e.Headers) > 0 && !proxied {
		return fmt.Errorf("sandbox %s: %w", id, errdefs.Publicf(errdefs.ErrInvalidArgument,
			"network.rules need domain names in network.allowOut"))
	}
	if proxied {
		if m.o.proxy == nil {
			return fmt.Errorf("sandbox %s: %w", id, errdefs.PublicWrap(ErrDomainUnsupported, "network.allowOut domains"))
		}
		if up && m.o.proxy.Rules != nil {
			m.o.proxy.Rules(addr, ProxyRules{Domains: e.Domains, Team: e.Team, Headers: e.Headers})
		}
	}
	if err := m.fw.WriteEgress(m.o.hostIf(id), e.Allow, e.Deny, e.Internet, proxied); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	if !proxied && up && m.o.proxy != nil && m.o.proxy.Rules != nil {
		m.o.proxy.Rules(addr, ProxyRules{})
	}
	m.mu.Lock()
	if _, ok := m.alloc.byID[id]; ok {
		m.internet[id] = e.Internet
	}
	m.mu.Unlock()
	m.log.DebugContext(ctx, "egress policy", "sandbox", id, "allow", e.Allow, "deny", e.Deny, "internet", e.Internet)
	return nil
}

// egressRanges returns the ranges (IPv4 first, then IPv6) enforced for
// id's interface now, as first and last addresses (for tests and
// diagnostics).
func (m *Manager) egressRanges(id string) (allow, deny [][2]netip.Addr, err error) {
	return m.fw.EgressRanges(m.o.hostIf(id))
}

// Blocked reports whether a is a destination no sandbox ever reaches
// whatever its policy (see firewall.Firewall.Blocked). The egress proxy
// checks it before dialling for a sandbox.
func (m *Manager) Blocked(a netip.Addr) bool { return m.fw.Blocked(a) }
