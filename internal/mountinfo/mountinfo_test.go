package mountinfo

import (
	"slices"
	"testing"
)

func TestUnescape(t *testing.T) {
	tests := []struct{ in, want string }{
		{`/a\040b`, "/a b"},
		{`/plain`, "/plain"},
		{`/tab\011x`, "/tab\tx"},
		{`/back\134slash`, `/back\slash`},
	}
	for _, tt := range tests {
		if got := Unescape(tt.in); got != tt.want {
			t.Errorf("Unescape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPointsHasRoot(t *testing.T) {
	ps, err := Points()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ps, "/") {
		t.Fatalf("mount points %v lack /", ps)
	}
}
