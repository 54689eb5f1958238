package idmap

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAllocateReusesFreedRanges(t *testing.T) {
	parent := t.TempDir()
	a := NewAllocator(parent)
	dirs := map[string]Range{}
	for _, name := range []string{"a", "b", "c"} {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		r, err := a.Allocate(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := Read(dir); err != nil || got != r {
			t.Fatalf("Read(%s) = %v, %v; want %v", name, got, err, r)
		}
		dirs[name] = r
	}
	if dirs["a"].Host != FirstHost || dirs["b"].Host != FirstHost+Size || dirs["c"].Host != FirstHost+2*Size {
		t.Fatalf("ranges %v", dirs)
	}
	if err := os.RemoveAll(filepath.Join(parent, "b")); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(parent, "d")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if r, err := a.Allocate(d); err != nil || r != dirs["b"] {
		t.Fatalf("after freeing b got %v, %v; want %v", r, err, dirs["b"])
	}
	// A directory with a corrupt record (found at the next start: records
	// are written once, and an allocator remembers what it read) does not
	// block allocation.
	a = NewAllocator(parent)
	if err := os.WriteFile(filepath.Join(parent, "a", fileName), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := filepath.Join(parent, "e")
	if err := os.Mkdir(e, 0o700); err != nil {
		t.Fatal(err)
	}
	if r, err := a.Allocate(e); err != nil || r.Host != FirstHost {
		t.Fatalf("got %v, %v; want the first range", r, err)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"1073741824", FirstHost, true},
		{"1073807360", FirstHost + Size, true},
		{"4294901760", 1<<32 - Size, true},
		{"0", 0, false},
		{"1073741825", 0, false},  // not on a range boundary
		{"1073676288", 0, false},  // below FirstHost
		{"4294967296", 0, false},  // over 32 bits
		{"-1073741824", 0, false}, // negative
		{" 1073741824", 0, false}, // Read trims, Parse does not
		{"", 0, false},
	}
	for _, tt := range tests {
		r, err := Parse(tt.in)
		if (err == nil) != tt.ok || r.Host != tt.want {
			t.Errorf("Parse(%q) = %v, %v; want %d ok=%v", tt.in, r, err, tt.want, tt.ok)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1073741824", "4294901760", "0", "x", "1073741825"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		if !r.Contains(r.Host) || !r.Contains(r.Host+Size-1) || r.Host < FirstHost || uint64(r.Host)+Size > 1<<32 {
			t.Fatalf("Parse(%q) = %v: not a valid range", s, r)
		}
	})
}

// A test scope's allocator starts at its own slot: two data dirs of two
// scopes never hand out the same host IDs.
func TestFromSlot(t *testing.T) {
	for _, tc := range []struct {
		first uint32
		want  uint32
	}{
		{0, FirstHost},
		{4096, FirstHost + 4096*Size},
		{maxSlots + 7, FirstHost + (maxSlots-1)*Size}, // clamped to the last slot
	} {
		parent := t.TempDir()
		dir := filepath.Join(parent, "x")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		r, err := NewAllocator(parent).FromSlot(tc.first).Allocate(dir)
		if err != nil || r.Host != tc.want {
			t.Errorf("FromSlot(%d).Allocate = %v, %v; want host %d", tc.first, r, err, tc.want)
		}
	}
}
