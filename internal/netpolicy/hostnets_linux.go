package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/moatsh/moat/internal/netpolicy/hostnet"
)

// computeDeny is hostnet.DenyList for this host, without the scope's own
// sandbox interfaces, plus the operator's prefixes.
func (m *Manager) computeDeny() ([]netip.Prefix, error) {
	addrs, routes, err := hostnet.State()
	if err != nil {
		return nil, err
	}
	return hostnet.DenyList(addrs, routes, m.o.deny, m.isSandboxIf), nil
}

func (m *Manager) isSandboxIf(name string) bool { return strings.HasPrefix(name, m.o.ifPrefix) }

// refreshHostNets recomputes the deny list and, when it changed (or the last
// write failed), replaces the hostnets chain's rules in one transaction.
func (m *Manager) refreshHostNets() error {
	deny, err := m.computeDeny()
	if err != nil {
		return err
	}
	changed, err := m.fw.SetDeny(deny)
	if err != nil || !changed {
		return err
	}
	m.log.Info("host networks closed to sandboxes", "table", m.o.table, "prefixes", fmt.Sprint(deny))
	return nil
}

// watchHostNets keeps the hostnets chain current until done is closed (see
// hostnet.Watch). A read of the host's networks that stayed interrupted
// through its retries (links coming and going, as when a thousand
// sandboxes are killed) is no error: the change that interrupted it is
// itself an event, after which the watch reads again.
func (m *Manager) watchHostNets(done <-chan struct{}) {
	hostnet.Watch(done, m.log, func() {
		err := m.refreshHostNets()
		switch {
		case errors.Is(err, netlink.ErrDumpInterrupted):
			m.log.Debug("host networks changing while read; reading again after the change", "err", err)
		case err != nil:
			m.log.Error("updating the sandboxes' host network block list", "err", err)
		}
	})
}
