package fsmark

import "testing"

func TestMarker(t *testing.T) {
	dir := t.TempDir()
	if Present(dir) {
		t.Fatal("a new directory is marked")
	}
	for range 2 { // idempotent
		if err := Write(dir); err != nil {
			t.Fatal(err)
		}
		if !Present(dir) {
			t.Fatal("not marked after Write")
		}
	}
	for range 2 {
		if err := Remove(dir); err != nil {
			t.Fatal(err)
		}
		if Present(dir) {
			t.Fatal("marked after Remove")
		}
	}
	if err := Write(dir + "/missing"); err == nil {
		t.Fatal("Write into a missing directory succeeded")
	}
}
