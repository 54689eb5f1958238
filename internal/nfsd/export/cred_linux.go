package export

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Cred is a caller's identity as its AUTH_UNIX credential states it.
type Cred struct {
	UID, GID uint32
	Groups   []uint32
}

// Nobody is the ID of callers without a usable identity.
const Nobody = 65534

// maxID is the largest ID the server's user namespace maps.
const maxID = 65535

var rootCred = Cred{}

// squash replaces IDs the user namespace does not map with Nobody.
func squash(c Cred) Cred {
	out := Cred{UID: c.UID, GID: c.GID}
	if out.UID > maxID {
		out.UID = Nobody
	}
	if out.GID > maxID {
		out.GID = Nobody
	}
	for _, g := range c.Groups {
		if g <= maxID {
			out.Groups = append(out.Groups, g)
		}
	}
	return out
}

// as runs f with c's filesystem identity on a locked OS thread. New
// threads of the Go runtime are never cloned from a locked one (it uses
// its template thread), so no other goroutine ever runs with c's IDs. A
// thread whose IDs cannot be restored is not given back: the process
// panics rather than serve anyone else as c.
func as(c Cred, f func() error) error {
	runtime.LockOSThread()
	c = squash(c)
	if err := setIDs(c); err != nil {
		restoreIDs()
		runtime.UnlockOSThread()
		return err
	}
	err := f()
	restoreIDs()
	runtime.UnlockOSThread()
	return err
}

// asRoot runs f as root of the user namespace on the current thread,
// which as has locked, then switches back to c.
func asRoot(c Cred, f func() error) error {
	restoreIDs()
	err := f()
	if serr := setIDs(squash(c)); serr != nil {
		restoreIDs()
		return serr
	}
	return err
}

func restoreIDs() {
	if err := setIDs(rootCred); err != nil {
		panic(fmt.Sprintf("nfsd: cannot restore a thread's credentials: %v", err))
	}
}

// setIDs sets the calling thread's groups, fsgid and fsuid and checks
// that they took (setfsuid and setfsgid report no errors).
func setIDs(c Cred) error {
	groups := make([]int, len(c.Groups))
	for i, g := range c.Groups {
		groups[i] = int(g)
	}
	if err := unix.Setgroups(groups); err != nil { // this thread only (raw setgroups)
		return fmt.Errorf("setgroups: %w", err)
	}
	_, _ = unix.SetfsgidRetGid(int(c.GID))
	if cur, _ := unix.SetfsgidRetGid(-1); cur != int(c.GID) {
		return fmt.Errorf("setfsgid %d: still %d: %w", c.GID, cur, unix.EPERM)
	}
	_, _ = unix.SetfsuidRetUid(int(c.UID))
	if cur, _ := unix.SetfsuidRetUid(-1); cur != int(c.UID) {
		return fmt.Errorf("setfsuid %d: still %d: %w", c.UID, cur, unix.EPERM)
	}
	return nil
}
