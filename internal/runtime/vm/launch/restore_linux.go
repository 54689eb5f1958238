package launch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/moatsh/moat/internal/guestinit"
	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
)

// Times are the milestones of a restore (a create's or a resume's), for
// the log.
type Times struct {
	Copied, NetUp, Launched, Loaded, Restored, Health time.Time
	MemData                                           int64 // bytes of memory file data copied
	Slot                                              bool  // files, network and QEMU were made ahead (a slot's)
}

// Phases are the log attributes of what follows the network's setup:
// launch, load, cont, health and the wait for the restore marker (until now).
func (tm *Times) Phases() slog.Attr {
	ms := func(a, b time.Time) time.Duration { return b.Sub(a).Round(time.Millisecond) }
	return slog.Group("", "launch", ms(tm.NetUp, tm.Launched), "load", ms(tm.Launched, tm.Loaded),
		"cont", ms(tm.Loaded, tm.Restored), "health", ms(tm.Restored, tm.Health), "marker", ms(tm.Health, time.Now()))
}

// Restore is the second half of a restore: a QEMU waiting with
// -incoming defer loads a device state and runs the guest.
type Restore struct {
	Proc    *qemu.Proc
	QMP     *qmp.Client
	Dir     string        // the sandbox's directory (QEMU's log)
	State   string        // the device state to load
	Consume func() error  // runs after the load, before the guest does (nil: nothing)
	GrowTo  int64         // when > 0, the disk's new size, set before the link comes up
	Envd    string        // envd's host:port in the guest
	Timeout time.Duration // of each wait for the guest
}

// Run loads x.State, runs x.Consume, continues the guest, grows its disk,
// raises its link and waits for envd, for the guest's restore marker (a
// fresh CRNG and clock before anyone else talks to it) and, with GrowTo,
// for its grown root file system. Milestones go to tm.
func (x *Restore) Run(ctx context.Context, tm *Times) error {
	con := x.Proc.Con
	restored := con.Watch(guestinit.RestoredMarker)
	defer restored.Stop()
	grown := con.Watch(guestinit.GrownMarker)
	defer grown.Stop()
	if err := qemu.Incoming(ctx, x.QMP, x.State); err != nil {
		return fmt.Errorf("load state: %w (qemu: %q)", err, qemu.TailFile(qemu.LogPath(x.Dir), 1024))
	}
	if x.Consume != nil {
		if err := x.Consume(); err != nil {
			return err
		}
	}
	tm.Loaded = time.Now()
	if err := x.QMP.Execute(ctx, "cont", nil, nil); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if x.GrowTo > 0 {
		if err := qemu.GrowDisk(ctx, x.QMP, x.GrowTo); err != nil {
			return err
		}
	}
	if err := qemu.SetLink(ctx, x.QMP, true); err != nil {
		return err
	}
	tm.Restored = time.Now()
	if err := guestenvd.WaitRestored(ctx, x.Envd, x.Timeout); err != nil {
		return fmt.Errorf("%w (console: %q)", err, con.Tail(1024))
	}
	tm.Health = time.Now()
	if err := restored.Wait(ctx, x.Timeout); err != nil {
		return err
	}
	if x.GrowTo > 0 {
		if err := grown.Wait(ctx, x.Timeout); err != nil {
			return fmt.Errorf("grow root file system to %d MiB: %w", x.GrowTo>>20, err)
		}
	}
	return nil
}
