package memfile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// SyncFiles fdatasyncs each file (their data and size reach the disk).
func SyncFiles(paths ...string) error {
	var errs []error
	for _, p := range paths {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("sync: %w", err))
			continue
		}
		if err := ignoringEINTR(func() error { return unix.Fdatasync(int(f.Fd())) }); err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %w", p, err))
		}
		f.Close()
	}
	return errors.Join(errs...)
}

// SyncDir makes renames and removals in dir durable.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// UnsyncedBytes is how much of paths is waiting to be written back (dirty
// or under writeback in the page cache, by cachestat(2)): what syncing
// them writes. Unknown counts as 0 (kernels before 6.5).
func UnsyncedBytes(paths ...string) int64 {
	var n int64
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		var st unix.Cachestat_t
		if unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &st, 0) == nil {
			n += int64(st.Dirty+st.Writeback) * int64(os.Getpagesize())
		}
		f.Close()
	}
	return n
}
