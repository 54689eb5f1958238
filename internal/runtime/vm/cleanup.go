package vm

import "errors"

// cleanups is a stack of undo functions, run once in LIFO order.
type cleanups struct{ fns []func() error }

func (c *cleanups) push(f func() error) { c.fns = append(c.fns, f) }

// run runs every undo, newest first, and empties the stack.
func (c *cleanups) run() error {
	var errs []error
	for i := len(c.fns) - 1; i >= 0; i-- {
		errs = append(errs, c.fns[i]())
	}
	c.fns = nil
	return errors.Join(errs...)
}
