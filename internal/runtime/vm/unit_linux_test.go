package vm

import (
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{{"abc123", true}, {"", false}, {"a-b", false}, {"ABC", false}, {strings.Repeat("a", 41), false}} {
		if err := validID(tc.id); (err == nil) != tc.ok {
			t.Errorf("validID(%q) = %v", tc.id, err)
		}
	}
}
