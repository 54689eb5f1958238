// Package clock is the orchestrator's time, separate so that the
// orchestrator's timers can run on a fake one in tests
// (orchestratortest.Clock) and its background work (package reaper) can
// share it without importing the orchestrator.
package clock

import "time"

// Clock is the real time in production; tests inject a fake so that
// timeouts fire at once.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once d has passed (in its own goroutine, or, for a
	// fake, in the goroutine that moves time), unless the timer is stopped.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call; false when it already happened or was stopped.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// AfterFunc implements Clock with time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
