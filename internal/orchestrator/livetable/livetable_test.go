package livetable_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator/livetable"
	"github.com/moatsh/moat/internal/store"
)

func TestTable(t *testing.T) {
	tab := livetable.New()
	addr := netip.MustParseAddr("10.0.0.2")
	e := tab.Add(store.Sandbox{ID: "s1", Team: "t1", State: store.StateRunning, MemoryMB: 512, DiskSizeMB: 1024, TemplateID: "tpl"}, addr)
	tab.Add(store.Sandbox{ID: "s2", Team: "t1", State: store.StatePaused, MemoryMB: 256, DiskSizeMB: 100}, addr)
	tab.SetForeign(map[string]store.Sandbox{"f1": {ID: "f1", Team: "t1", Runtime: "vm", State: store.StateRunning, MemoryMB: 64, DiskSizeMB: 10, TemplateID: "old"}})

	for _, c := range []struct {
		team, id string
		kind     error
	}{
		{"t1", "s1", nil},
		{"t2", "s1", errdefs.ErrNotFound}, // another team's: as unknown
		{"", "s1", errdefs.ErrNotFound},
		{"t1", "nope", errdefs.ErrNotFound},
		{"t1", "f1", errdefs.ErrUnavailable}, // on a runtime not run here
		{"t2", "f1", errdefs.ErrNotFound},
	} {
		_, err := tab.Get(c.team, c.id)
		e2, lerr := tab.Lock(c.team, c.id)
		if c.kind == nil {
			if err != nil || lerr != nil {
				t.Fatalf("%s/%s: %v, %v", c.team, c.id, err, lerr)
			}
			e2.Op.Unlock()
			continue
		}
		if !errors.Is(err, c.kind) || !errors.Is(lerr, c.kind) {
			t.Fatalf("%s/%s: %v, %v; want %v", c.team, c.id, err, lerr, c.kind)
		}
	}

	if n := tab.Reserved(); n.MemoryMiB != 512+64 || n.DiskMiB != 1024+100+10 {
		t.Fatalf("reserved %+v", n)
	}
	release := tab.HoldTemplate("creating")
	if in := tab.TemplatesInUse(); !in["tpl"] || !in["old"] || !in["creating"] {
		t.Fatalf("templates in use %v", in)
	}
	release()
	if in := tab.TemplatesInUse(); in["creating"] {
		t.Fatal("released template still in use")
	}

	_, _, gen, _ := tab.Route("s1")
	tab.Moved(e, netip.MustParseAddr("10.0.0.3"))
	if _, a, g, ok := tab.Route("s1"); !ok || g != gen+1 || a.String() != "10.0.0.3" {
		t.Fatalf("route after a move: %v %d %v", a, g, ok)
	}

	var removed []string
	tab.OnRemove(func(id string) {
		if _, _, _, ok := tab.Route(id); ok {
			t.Errorf("%s still routable in OnRemove", id)
		}
		removed = append(removed, id)
	})
	e.Op.Lock()
	also := false
	tab.Forget(e, "s1", func() { also = true })
	e.Op.Unlock()
	if !also || len(removed) != 1 || removed[0] != "s1" {
		t.Fatalf("forget: also %v, removed %v", also, removed)
	}
	if _, err := tab.LockAny("s1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("lock of a forgotten sandbox: %v", err)
	}
	if _, _, gone := tab.Read(e); !gone {
		t.Fatal("forgotten entry not gone")
	}
}
