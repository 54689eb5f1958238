package admission

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// HostFiguresFor returns a Capacity.Host that reads /proc/meminfo and the
// filesystem holding dir.
func HostFiguresFor(dir string) func() (HostFigures, error) {
	return func() (HostFigures, error) {
		f, err := os.Open("/proc/meminfo")
		if err != nil {
			return HostFigures{}, err
		}
		defer f.Close()
		total, avail, err := parseMeminfo(f)
		if err != nil {
			return HostFigures{}, err
		}
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return HostFigures{}, fmt.Errorf("statfs %s: %w", dir, err)
		}
		mib := func(blocks uint64) int { return int(blocks * uint64(st.Bsize) >> 20) }
		return HostFigures{MemTotal: total, MemAvailable: avail, DiskTotal: mib(st.Blocks), DiskFree: mib(st.Bavail)}, nil
	}
}
