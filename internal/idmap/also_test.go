package idmap

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestAllocateSkipsOtherParents: ranges recorded under the also parents
// (another runtime's sandboxes) are not handed out again.
func TestAllocateSkipsOtherParents(t *testing.T) {
	root := t.TempDir()
	mine, theirs := filepath.Join(root, "vm"), filepath.Join(root, "containers")
	for _, d := range []string{mine, theirs, filepath.Join(theirs, "c1"), filepath.Join(mine, "v1")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewAllocator(theirs).Allocate(filepath.Join(theirs, "c1")); err != nil {
		t.Fatal(err)
	}
	a := NewAllocator(mine, theirs, filepath.Join(root, "missing"))
	r, err := a.Allocate(filepath.Join(mine, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Host != FirstHost+Size {
		t.Errorf("got %d, want the second range (the first is the container's)", r.Host)
	}
}

// TestConcurrentAllocatorsOfTwoParents: two allocators listing each
// other's parent (the container and vm runtimes of one data dir, here
// racing from many goroutines as if from two processes) never hand out a
// range twice.
func TestConcurrentAllocatorsOfTwoParents(t *testing.T) {
	root := t.TempDir()
	ctr, vm := filepath.Join(root, "sandboxes"), filepath.Join(root, "vm", "sandboxes")
	as := []*Allocator{NewAllocator(ctr, vm), NewAllocator(vm, ctr)}
	const per = 40
	var wg sync.WaitGroup
	got := make([][]Range, 2*4)
	errs := make(chan error, len(got)*per)
	for g := range got {
		parent := []string{ctr, vm}[g%2]
		for i := range per {
			if err := os.MkdirAll(filepath.Join(parent, fmt.Sprintf("g%d-%d", g, i)), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				r, err := as[g%2].Allocate(filepath.Join(parent, fmt.Sprintf("g%d-%d", g, i)))
				if err != nil {
					errs <- err
					return
				}
				got[g] = append(got[g], r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	for _, rs := range got {
		for _, r := range rs {
			if seen[r.Host] {
				t.Fatalf("range %d handed out twice", r.Host)
			}
			seen[r.Host] = true
		}
	}
	if len(seen) != len(got)*per {
		t.Fatalf("%d ranges, want %d", len(seen), len(got)*per)
	}
}
