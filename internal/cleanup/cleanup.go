// Package cleanup is the undo stack shared by netpolicy and the runtime
// backends: each step of a multi-step setup pushes its undo, and on failure
// (or teardown) the stack runs them newest first. It exists so the three
// places that build host objects in stages unwind them the same way.
package cleanup

import "errors"

// Stack is a LIFO of undo functions. The zero value is ready to use; it is
// not safe for concurrent use (callers guard it with their own lock).
type Stack struct{ fns []func() error }

// Push adds f on top of the stack.
func (s *Stack) Push(f func() error) { s.fns = append(s.fns, f) }

// Run runs every undo once, newest first, empties the stack and returns
// all their errors joined (nil when every undo succeeded).
func (s *Stack) Run() error {
	var errs []error
	for i := len(s.fns) - 1; i >= 0; i-- {
		errs = append(errs, s.fns[i]())
	}
	s.fns = nil
	return errors.Join(errs...)
}
