package cleanup

import (
	"errors"
	"slices"
	"testing"
)

func TestStackRunsLIFOOnceAndJoinsErrors(t *testing.T) {
	var s Stack
	var order []int
	e1, e3 := errors.New("one"), errors.New("three")
	s.Push(func() error { order = append(order, 1); return e1 })
	s.Push(func() error { order = append(order, 2); return nil })
	s.Push(func() error { order = append(order, 3); return e3 })

	err := s.Run()
	if !slices.Equal(order, []int{3, 2, 1}) {
		t.Fatalf("order = %v, want [3 2 1]", order)
	}
	if !errors.Is(err, e1) || !errors.Is(err, e3) {
		t.Fatalf("err = %v, want both undo errors joined", err)
	}
	if err := s.Run(); err != nil || len(order) != 3 {
		t.Fatalf("second Run: err = %v, order = %v; want nothing run again", err, order)
	}
}

func TestEmptyStack(t *testing.T) {
	var s Stack
	if err := s.Run(); err != nil {
		t.Fatalf("Run on empty stack = %v", err)
	}
}
