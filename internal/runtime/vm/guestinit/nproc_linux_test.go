package guestinit

import (
	"strings"
	"testing"
)

func TestUserTasks(t *testing.T) {
	for _, tc := range []struct {
		meminfo string
		want    uint64
	}{
		{"MemTotal:         502516 kB\nMemFree: 1 kB\n", 490},
		{"MemFree: 1 kB\nMemTotal: 2097152 kB\n", 2048},
		{"MemTotal: 10240 kB\n", 64}, // at least 64
		{"MemFree: 1 kB\n", 0},       // no MemTotal: no limit set
		{"MemTotal: lots kB\n", 0},
		{"", 0},
	} {
		if got := userTasks(strings.NewReader(tc.meminfo)); got != tc.want {
			t.Errorf("userTasks(%q) = %d, want %d", tc.meminfo, got, tc.want)
		}
	}
}
