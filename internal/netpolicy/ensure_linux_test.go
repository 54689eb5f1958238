package netpolicy

import (
	"context"
	"fmt"
	"net"
	"testing"
)

// A table removed behind the manager's back (another server's Close, an
// operator's nft flush) is reinstalled by the next Setup: no sandbox is ever
// wired up without its firewall.
func TestSetupReinstallsMissingTable(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	if err := m.fw.Delete(); err != nil {
		t.Fatal(err)
	}
	id := testID(t)
	n, err := m.Setup(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(ctx, id) })
	hostAll := listen(t, "0.0.0.0:0").Addr().(*net.TCPAddr).Port
	inNetns(t, n.NSPath, func() {
		if err := dial(fmt.Sprintf("%s:%d", n.HostAddr, hostAll)); err == nil {
			t.Error("sandbox reached a host service after the table was deleted")
		}
	})
}
