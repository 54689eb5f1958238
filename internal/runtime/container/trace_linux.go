package container

import "time"

// trace records how long each step of a create took, for the debug log
// (issue 12: find where a create's time goes).
type trace struct {
	last  time.Time
	attrs []any // name, duration, name, duration...
}

func newTrace() *trace { return &trace{last: time.Now()} }

// step ends the step called name: the time since the previous step.
func (t *trace) step(name string) {
	now := time.Now()
	t.attrs = append(t.attrs, name, now.Sub(t.last).Round(time.Microsecond))
	t.last = now
}
