package store

import "slices"

// State is where a sandbox is in its lifecycle, as stored. The
// orchestrator's commit changes it, only along the edges CanBecome allows;
// a row is inserted running once the sandbox is up and deleted when it is
// killed, so there is no state for "creating" or "killed":
//
//	         Create               Pause
//	(none) ──────────► running ─────────► pausing ──► paused
//	                    ▲  ▲ │   failure     │           │ Resume / Connect /
//	                    │  └─┼───────────────┘           │ Wake (auto-resume)
//	                    │    │                           ▼
//	                    └────┼──────────────────────  resuming ──► paused (failure)
//	                         │
//	                         └── Kill / timeout / death ──► (row deleted)
type State string

// The states.
const (
	StateRunning  State = "running"
	StatePausing  State = "pausing"
	StatePaused   State = "paused"
	StateResuming State = "resuming"
)

// transitions are the state machine's edges (the diagram above).
var transitions = map[State][]State{
	StateRunning:  {StatePausing},
	StatePausing:  {StatePaused, StateRunning}, // done, or failed
	StatePaused:   {StateResuming},
	StateResuming: {StateRunning, StatePaused}, // done, or failed
}

// Valid reports whether s is one of the states.
func (s State) Valid() bool {
	_, ok := transitions[s]
	return ok
}

// CanBecome reports whether a sandbox in state s may be recorded in state
// next: an edge of the machine, or s itself (a change of the end time or
// the network policy keeps the state). Nothing leaves or enters an
// invalid state.
func (s State) CanBecome(next State) bool {
	if !s.Valid() || !next.Valid() {
		return false
	}
	return s == next || slices.Contains(transitions[s], next)
}
