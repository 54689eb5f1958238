package sandboxid

import (
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		id  string
		max int
		ok  bool
	}{
		{"abc123", 64, true},
		{strings.Repeat("a", 40), 40, true},
		{strings.Repeat("a", 41), 40, false},
		{"", 64, false},
		{"ABC", 64, false},
		{"a-b", 64, false},
		{"../x", 64, false},
	} {
		err := Validate(tc.id, tc.max)
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%q, %d) = %v, want ok=%v", tc.id, tc.max, err, tc.ok)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("Validate(%q, %d) = %v, want an invalid-argument error", tc.id, tc.max, err)
		}
	}
}

func TestNew(t *testing.T) {
	id := New()
	if len(id) != 21 || id[0] != 'i' || Validate(id, 64) != nil {
		t.Fatalf("New() = %q", id)
	}
}
