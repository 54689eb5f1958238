package guestinit

import (
	"fmt"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// rndReseedCRNG is RNDRESEEDCRNG, _IO('R', 0x07): reseed the kernel CRNG now.
const rndReseedCRNG = 0x5207

// Console markers the host waits for.
const (
	// LinkDownMarker: the template's eth0 lost its carrier (the host takes
	// the snapshot in this state).
	LinkDownMarker = "moat-vminit: link down"
	// RestoredMarker: the carrier came back after a restore and the guest
	// reseeded its CRNG and set its clock from the RTC.
	RestoredMarker = "moat-vminit: restored"
)

// watchRestores treats eth0 losing and regaining its carrier as a restore
// from a snapshot: the host cuts the link before snapshotting a template and
// restores clones link-down, raising the link after `cont`. Every clone
// then has the same kernel RNG state and a stale clock, so both are renewed.
func watchRestores() {
	ch, done := make(chan netlink.LinkUpdate, 16), make(chan struct{})
	if err := netlink.LinkSubscribe(ch, done); err != nil {
		fmt.Fprintln(os.Stderr, "moat-vminit: link watch:", err)
		return
	}
	down, warm := false, warmUpOn()
	for u := range ch {
		if u.Attrs().Name != "eth0" {
			continue
		}
		up := u.Attrs().RawFlags&unix.IFF_LOWER_UP != 0
		switch {
		case !up && !down:
			down = true
			fmt.Println(LinkDownMarker)
		case up && down:
			down = false
			fmt.Println(RestoredMarker + ": " + renew())
			if warm {
				go warmUp()
			}
		}
	}
}

// renew reseeds the CRNG (RDRAND and virtio-rng input differ per clone) and
// sets the clock from the RTC, which reads the host's time; envd's /init
// refines the clock later.
func renew() string {
	res := "crng reseeded"
	if f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0); err == nil {
		if err := unix.IoctlSetInt(int(f.Fd()), rndReseedCRNG, 0); err != nil {
			res = "crng: " + err.Error()
		}
		f.Close()
	}
	f, err := os.Open("/dev/rtc0")
	if err != nil {
		return res + ", no rtc"
	}
	defer f.Close()
	rt, err := unix.IoctlGetRTCTime(int(f.Fd()))
	if err != nil {
		return res + ", rtc: " + err.Error()
	}
	t := time.Date(int(rt.Year)+1900, time.Month(rt.Mon+1), int(rt.Mday), int(rt.Hour), int(rt.Min), int(rt.Sec), 0, time.UTC)
	if d := time.Since(t); d > 2*time.Second || d < -2*time.Second {
		tv := unix.NsecToTimeval(t.UnixNano())
		if err := unix.Settimeofday(&tv); err != nil {
			return res + ", settimeofday: " + err.Error()
		}
		return res + ", clock set to " + t.Format(time.RFC3339)
	}
	return res + ", clock ok"
}
