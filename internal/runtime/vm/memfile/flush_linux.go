package memfile

import (
	"sync"
	"time"
)

// flushEvery is how often the memory files of running sandboxes are
// written back. The guest writes into its memory file (a shared mapping),
// and Pause syncs it: without this, that sync writes whatever the guest
// dirtied since the kernel's own writeback last ran (up to 30 s of
// writes); with it, about what the guest dirtied in the last flushEvery.
// Idle guests dirty nothing, so this costs nothing for them.
const flushEvery = 2 * time.Second

// Flusher starts the writeback of registered files every flushEvery, on
// one low-priority thread (CPU nice 19, idle I/O class), without waiting
// for it to finish.
type Flusher struct {
	mu      sync.Mutex
	files   map[string]struct{} // guarded by mu
	started bool                // guarded by mu
}

// Add registers path (a running sandbox's memory file).
func (f *Flusher) Add(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.files == nil {
		f.files = map[string]struct{}{}
	}
	f.files[path] = struct{}{}
	if !f.started {
		f.started = true
		go f.loop()
	}
}

// Remove unregisters path.
func (f *Flusher) Remove(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.files, path)
}

// loop runs for the life of the process: a Runtime is never closed.
func (f *Flusher) loop() {
	lowPriorityThread()
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for range t.C {
		f.mu.Lock()
		paths := make([]string, 0, len(f.files))
		for p := range f.files {
			paths = append(paths, p)
		}
		f.mu.Unlock()
		for _, p := range paths {
			StartWriteback(p)
		}
	}
}
