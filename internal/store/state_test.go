package store

import "testing"

func TestStateCanBecome(t *testing.T) {
	all := []State{StateRunning, StatePausing, StatePaused, StateResuming}
	allowed := map[[2]State]bool{
		{StateRunning, StatePausing}:  true,
		{StatePausing, StatePaused}:   true,
		{StatePausing, StateRunning}:  true,
		{StatePaused, StateResuming}:  true,
		{StateResuming, StateRunning}: true,
		{StateResuming, StatePaused}:  true,
	}
	for _, from := range all {
		if !from.Valid() {
			t.Errorf("%s is not valid", from)
		}
		for _, to := range all {
			want := from == to || allowed[[2]State{from, to}]
			if got := from.CanBecome(to); got != want {
				t.Errorf("%s.CanBecome(%s) = %v, want %v", from, to, got, want)
			}
		}
	}
	for _, bad := range []State{"", "killed", "Running"} {
		if bad.Valid() || bad.CanBecome(StateRunning) || StateRunning.CanBecome(bad) {
			t.Errorf("invalid state %q accepted", bad)
		}
	}
}
