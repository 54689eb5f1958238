package guestinit

import "testing"

func TestUserTasks(t *testing.T) {
	for _, tc := range []struct {
		memBytes, want uint64
	}{
		{502516 << 10, 490},
		{2 << 30, 2048},
		{10 << 20, 64}, // at least 64
		{0, 0},         // unknown: no limit set
	} {
		if got := userTasks(tc.memBytes); got != tc.want {
			t.Errorf("userTasks(%d) = %d, want %d", tc.memBytes, got, tc.want)
		}
	}
}
