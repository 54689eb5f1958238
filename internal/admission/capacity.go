package admission

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Capacity is a simple model of how many sandboxes a host holds: every
// sandbox reserves its memory and disk size; reservations may add up to an
// overcommit factor times the host's memory and the data dir's filesystem
// (sandboxes rarely use all they may, and disks are sparse), and the host
// must keep a floor of memory and disk actually free.
type Capacity struct {
	MemOvercommit  float64     // Σ reserved memory ≤ this × MemTotal (default 4)
	DiskOvercommit float64     // Σ reserved disk ≤ this × filesystem size (default 8)
	MinFreeMemMiB  int         // MemAvailable must stay above this (default 256)
	MinFreeDiskMiB int         // free space in the data dir must stay above this (default 1024)
	Reserved       func() Need // what live sandboxes reserve now

	// Host reads the host's figures; nil means the real host (HostFigures).
	Host func() (HostFigures, error)
}

// HostFigures are the host numbers the model needs, in MiB.
type HostFigures struct {
	MemTotal, MemAvailable int
	DiskTotal, DiskFree    int
}

func (c Capacity) withDefaults() Capacity {
	if c.MemOvercommit <= 0 {
		c.MemOvercommit = 4
	}
	if c.DiskOvercommit <= 0 {
		c.DiskOvercommit = 8
	}
	if c.MinFreeMemMiB <= 0 {
		c.MinFreeMemMiB = 256
	}
	if c.MinFreeDiskMiB <= 0 {
		c.MinFreeDiskMiB = 1024
	}
	return c
}

// Room reports why the host cannot take a sandbox needing n (nil if it can).
func (c Capacity) Room(n Need) error {
	c = c.withDefaults()
	if c.Host == nil {
		return fmt.Errorf("admission: Capacity.Host is not set")
	}
	h, err := c.Host()
	if err != nil {
		return fmt.Errorf("reading host capacity: %w", err)
	}
	var r Need
	if c.Reserved != nil {
		r = c.Reserved()
	}
	switch {
	case h.MemAvailable < c.MinFreeMemMiB:
		return fmt.Errorf("%d MiB of memory available, %d MiB kept free", h.MemAvailable, c.MinFreeMemMiB)
	case float64(r.MemoryMiB+n.MemoryMiB) > c.MemOvercommit*float64(h.MemTotal):
		return fmt.Errorf("sandboxes reserve %d MiB of memory, %d MiB more exceeds %g × %d MiB",
			r.MemoryMiB, n.MemoryMiB, c.MemOvercommit, h.MemTotal)
	case h.DiskFree < c.MinFreeDiskMiB:
		return fmt.Errorf("%d MiB of disk free in the data dir, %d MiB kept free", h.DiskFree, c.MinFreeDiskMiB)
	case float64(r.DiskMiB+n.DiskMiB) > c.DiskOvercommit*float64(h.DiskTotal):
		return fmt.Errorf("sandboxes reserve %d MiB of disk, %d MiB more exceeds %g × %d MiB",
			r.DiskMiB, n.DiskMiB, c.DiskOvercommit, h.DiskTotal)
	}
	return nil
}

// parseMeminfo reads MemTotal and MemAvailable (MiB) from /proc/meminfo's format.
func parseMeminfo(r io.Reader) (total, avail int, err error) {
	sc := bufio.NewScanner(r)
	seen := 0
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "MemTotal" && k != "MemAvailable") {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, 0, fmt.Errorf("meminfo: %s has no value", k)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, 0, fmt.Errorf("meminfo: %s: bad value %q", k, f[0])
		}
		if k == "MemTotal" {
			total = int(kb / 1024)
		} else {
			avail = int(kb / 1024)
		}
		seen++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("meminfo: %w", err)
	}
	if seen < 2 {
		return 0, 0, fmt.Errorf("meminfo: MemTotal or MemAvailable missing")
	}
	return total, avail, nil
}

// Limit is what sandboxes may reserve in all before creates are refused:
// the overcommit factors times the host's memory and the data dir's
// filesystem (the free floors aside).
func (c Capacity) Limit() (Need, error) {
	c = c.withDefaults()
	if c.Host == nil {
		return Need{}, fmt.Errorf("admission: Capacity.Host is not set")
	}
	h, err := c.Host()
	if err != nil {
		return Need{}, fmt.Errorf("reading host capacity: %w", err)
	}
	return Need{MemoryMiB: int(c.MemOvercommit * float64(h.MemTotal)), DiskMiB: int(c.DiskOvercommit * float64(h.DiskTotal))}, nil
}
