package admission

import (
	"strings"
	"testing"
)

func TestCapacityRoom(t *testing.T) {
	host := HostFigures{MemTotal: 1000, MemAvailable: 800, DiskTotal: 10000, DiskFree: 5000}
	for _, tc := range []struct {
		name     string
		c        Capacity
		h        HostFigures
		reserved Need
		need     Need
		want     string // "" = room
	}{
		{"empty host", Capacity{}, host, Need{}, Need{MemoryMiB: 512, DiskMiB: 2048}, ""},
		{"memory overcommit reached", Capacity{MemOvercommit: 2}, host, Need{MemoryMiB: 1600}, Need{MemoryMiB: 512}, "reserve 1600 MiB of memory"},
		{"memory overcommit exact", Capacity{MemOvercommit: 2}, host, Need{MemoryMiB: 1488}, Need{MemoryMiB: 512}, ""},
		{"little memory available", Capacity{}, HostFigures{MemTotal: 1000, MemAvailable: 100, DiskTotal: 10000, DiskFree: 5000}, Need{}, Need{MemoryMiB: 1}, "100 MiB of memory available"},
		{"disk floor", Capacity{MinFreeDiskMiB: 6000}, host, Need{}, Need{DiskMiB: 1}, "5000 MiB of disk free"},
		{"disk overcommit", Capacity{DiskOvercommit: 1}, host, Need{DiskMiB: 9000}, Need{DiskMiB: 2048}, "reserve 9000 MiB of disk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			h := tc.h
			c.Host = func() (HostFigures, error) { return h, nil }
			r := tc.reserved
			c.Reserved = func() Need { return r }
			err := c.Room(tc.need)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Room = %v, want room", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Room = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseMeminfo(t *testing.T) {
	total, avail, err := parseMeminfo(strings.NewReader("MemTotal:       24684084 kB\nMemFree: 1 kB\nMemAvailable:   2048 kB\n"))
	if err != nil || total != 24105 || avail != 2 {
		t.Fatalf("parseMeminfo = %d, %d, %v", total, avail, err)
	}
	for _, bad := range []string{"", "MemTotal: 5 kB\n", "MemTotal:\nMemAvailable: 1 kB\n", "MemTotal: x kB\nMemAvailable: 1 kB\n", "MemTotal: -5 kB\nMemAvailable: 1 kB\n"} {
		if _, _, err := parseMeminfo(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMeminfo(%q) accepted", bad)
		}
	}
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add("MemTotal: 1024 kB\nMemAvailable: 512 kB\n")
	f.Add("MemAvailable:\n")
	f.Fuzz(func(t *testing.T, s string) {
		total, avail, err := parseMeminfo(strings.NewReader(s))
		if err == nil && (total < 0 || avail < 0) {
			t.Fatalf("negative figures %d %d", total, avail)
		}
	})
}

func TestHostFiguresForReadsTheHost(t *testing.T) {
	h, err := HostFiguresFor(t.TempDir())()
	if err != nil {
		t.Fatal(err)
	}
	if h.MemTotal <= 0 || h.MemAvailable <= 0 || h.DiskTotal <= 0 || h.DiskFree < 0 || h.MemAvailable > h.MemTotal {
		t.Fatalf("host figures %+v", h)
	}
}

func TestCapacityLimit(t *testing.T) {
	host := func() (HostFigures, error) { return HostFigures{MemTotal: 1000, DiskTotal: 10000}, nil }
	for _, tc := range []struct {
		name string
		c    Capacity
		want Need
	}{
		{"defaults", Capacity{Host: host}, Need{MemoryMiB: 4000, DiskMiB: 80000}},
		{"configured", Capacity{Host: host, MemOvercommit: 1.5, DiskOvercommit: 1}, Need{MemoryMiB: 1500, DiskMiB: 10000}},
	} {
		got, err := tc.c.Limit()
		if err != nil || got != tc.want {
			t.Errorf("%s: Limit = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := (Capacity{}).Limit(); err == nil {
		t.Error("Limit without Host: want an error")
	}
}
